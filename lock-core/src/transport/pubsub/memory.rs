//! The hub on an in-memory server of this process (feature `memory`): each
//! channel with waiters is one subscription on the server, its messages
//! handed to the hub as they are published. A flush of the server (a
//! restart that lost every key) ends every subscription: the channel's
//! waiters are woken (an unlock may have been lost) and it is subscribed
//! again at once. On a simulated network (`memory/interpose.rs`) each
//! message may be dropped or delayed, in order per subscription.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Command, Shared};
use crate::memory::interpose::MessageFate;
use crate::transport::memory_link::MemoryEndpoint;

/// Runs the hub's subscriptions on `server` until `shutdown` or until the
/// hub is gone.
pub(super) async fn run(
    shared: Arc<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    server: MemoryEndpoint,
    shutdown: CancellationToken,
) {
    let mut forwarders: HashMap<String, JoinHandle<()>> = HashMap::new();
    loop {
        let command = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            command = commands.recv() => command,
        };
        match command {
            None => break,
            Some(Command::Subscribe {
                channel,
                generation,
            }) => {
                if !shared.wants(&channel, generation) {
                    continue;
                }
                if let Some(old) = forwarders.remove(&channel) {
                    old.abort();
                }
                let task = tokio::spawn(forward(
                    shared.clone(),
                    server.clone(),
                    channel.clone(),
                    generation,
                ));
                forwarders.insert(channel, task);
            }
            Some(Command::Unsubscribe { channel }) => {
                if shared.state().channels.contains_key(&channel) {
                    // New waiters came back meanwhile: stay subscribed.
                    continue;
                }
                if let Some(task) = forwarders.remove(&channel) {
                    task.abort();
                }
            }
        }
    }
    for task in forwarders.into_values() {
        task.abort();
    }
}

/// Subscribes to `channel` and hands its messages to the hub; after a
/// flush of the server, subscribes again (while the channel is wanted).
async fn forward(shared: Arc<Shared>, server: MemoryEndpoint, channel: String, generation: u64) {
    let network = server.server.interposer();
    while shared.wants(&channel, generation) {
        let mut messages = server.server.subscribe(channel.as_bytes());
        shared.mark_live(&channel, generation);
        let mut last = tokio::time::Instant::now();
        while let Some(payload) = messages.recv().await {
            if let Some(network) = &network {
                match network.message(&server.name, channel.as_bytes()) {
                    MessageFate::Drop => continue,
                    MessageFate::Deliver { after } => {
                        last = last.max(tokio::time::Instant::now() + after);
                        tokio::time::sleep_until(last).await;
                    }
                }
            }
            shared.dispatch(&channel, &payload);
        }
        // The server ended the subscription (a flush): unlocks may have
        // been lost meanwhile, so the waiters retry once.
        shared.moved(&channel);
    }
}
