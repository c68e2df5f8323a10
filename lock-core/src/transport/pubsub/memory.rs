//! The hub on an in-memory server of this process (feature `memory`): each
//! channel with waiters is one subscription on the server, its messages
//! handed to the hub as they are published. A flush of the server (a
//! restart that lost every key) ends every subscription: the channel's
//! waiters are woken (an unlock may have been lost) and it is subscribed
//! again at once.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Command, Shared};
use crate::memory::Server;

/// Runs the hub's subscriptions on `server` until `shutdown` or until the
/// hub is gone.
pub(super) async fn run(
    shared: Arc<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    server: Arc<Server>,
    shutdown: CancellationToken,
) {
    let mut forwarders: HashMap<String, JoinHandle<()>> = HashMap::new();
    loop {
        let command = tokio::select! {
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
async fn forward(shared: Arc<Shared>, server: Arc<Server>, channel: String, generation: u64) {
    while shared.wants(&channel, generation) {
        let mut messages = server.subscribe(channel.as_bytes());
        shared.mark_live(&channel, generation);
        while let Some(payload) = messages.recv().await {
            shared.dispatch(&channel, &payload);
        }
        // The server ended the subscription (a flush): unlocks may have
        // been lost meanwhile, so the waiters retry once.
        shared.moved(&channel);
    }
}
