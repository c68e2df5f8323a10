//! The engine of one client: the shared state, the watchdog that renews
//! holds, the pub/sub hub that wakes waiters, and the token that stops
//! them. Every public face (client, lock, guard) reaches the engine
//! through one `Arc<Engine>`; background tasks hold the shared state only,
//! so they end when the last face is gone.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::{ClientConfig, ErrorHook};
use crate::error::{Error, Result};
use crate::hold::eviction::EvictionCheck;
use crate::hold::shared::Core;
use crate::hold::watchdog::Watchdog;
use crate::transport::connection::{build_pool, Manager};
use crate::transport::pubsub::PubSub;

/// One client's engine (see the module docs).
pub(crate) struct Engine {
    pub(crate) core: Arc<Core>,
    /// What the server's eviction policy was last seen as (see `eviction.rs`).
    pub(crate) eviction: EvictionCheck,
    pub(crate) watchdog: Watchdog,
    pub(crate) pubsub: PubSub,
    /// Stops the watchdog and the pub/sub task.
    pub(crate) stop_tasks: CancellationToken,
}

impl Drop for Engine {
    fn drop(&mut self) {
        // The last handle is gone (guards hold one, so every guard is gone
        // too): stop the watchdog and the pub/sub task, and let the
        // releases of dropped guards finish where the runtime allows it.
        self.stop_tasks.cancel();
        crate::hold::background::flush_on_drop(&self.core);
    }
}

impl Engine {
    /// Starts the engine of a client of `config`: its watchdog and pub/sub
    /// tasks run from now on; connections open on first use.
    pub(crate) fn start(config: ClientConfig, error_hook: Option<ErrorHook>) -> Result<Engine> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::InvalidArgument(
                "a LockClient must be built inside a tokio runtime (it starts background tasks)"
                    .into(),
            ));
        }
        let manager = Manager::new(&config)?;
        let endpoint = manager.endpoint().clone();
        let stop_tasks = CancellationToken::new();
        endpoint.watch_switches(stop_tasks.clone());
        let pool = build_pool(manager, config.pool_size);
        let cluster = endpoint.is_cluster();
        let core =
            Arc::new_cyclic(|this| Core::new(config, error_hook, pool, cluster, this.clone()));
        crate::metrics::describe();
        let watchdog = Watchdog::start(core.clone(), stop_tasks.clone());
        let reporter = core.clone();
        let pubsub = PubSub::start(
            endpoint,
            core.sharding.clone(),
            core.config.connect_timeout,
            core.config.command_timeout,
            stop_tasks.clone(),
            Box::new(move |e| reporter.report(&Error::Redis(e.clone()))),
        );
        Ok(Engine {
            core,
            eviction: EvictionCheck::default(),
            watchdog,
            pubsub,
            stop_tasks,
        })
    }
}
