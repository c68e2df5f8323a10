//! The pub/sub hub's connection on a Redis Cluster: one redis-rs cluster
//! connection over RESP3 whose pushes (messages, subscription
//! confirmations, disconnections) arrive on a channel.
//!
//! With sharded pub/sub each lock channel is subscribed with `SSUBSCRIBE`
//! on the primary of its slot (redis-rs routes by the channel's slot and
//! follows `MOVED`), one channel per command (a sharded subscription must
//! stay within one slot). When a slot moves, the server ends the
//! subscriptions of its channels with an unrequested `sunsubscribe` push:
//! the channels that still have waiters are subscribed again (on the new
//! owner) and their waiters woken to retry once, as after any reconnect.
//! With classic pub/sub (`PubSubMode::Global`) `SUBSCRIBE` is used instead.

use std::sync::Arc;
use std::time::Duration;

use redis::{PushInfo, PushKind, RedisResult, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{after_connect, sleep_or_shutdown, Command, Shared, Step, MAX_BACKOFF, MIN_BACKOFF};
use crate::transport::endpoint::ClusterNodes;
use crate::transport::pubsub::sharding::Sharding;

/// Runs the hub on a cluster until `shutdown`.
pub(super) async fn run(
    shared: Arc<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    nodes: &ClusterNodes,
    sharding: Arc<Sharding>,
    connect_timeout: Duration,
    command_timeout: Duration,
    shutdown: CancellationToken,
) {
    let mut backoff = MIN_BACKOFF;
    loop {
        let (push_tx, mut pushes) = mpsc::unbounded_channel::<PushInfo>();
        let connect = async {
            let client = nodes
                .builder()
                .map_err(|e| {
                    redis::RedisError::from((
                        redis::ErrorKind::InvalidClientConfig,
                        "cluster",
                        e.to_string(),
                    ))
                })?
                .use_protocol(redis::ProtocolVersion::RESP3)
                .push_sender(push_tx)
                .response_timeout(command_timeout)
                .build()?;
            let conn = client.get_async_connection().await?;
            let sharded = sharding
                .sharded(|| async {
                    use redis::aio::ConnectionLike;
                    conn.clone()
                        .req_packed_command(&crate::transport::pubsub::sharding::probe_cmd())
                        .await
                        .and_then(Value::extract_error)
                })
                .await?;
            Ok::<_, redis::RedisError>((conn, sharded))
        };
        let connected = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            r = tokio::time::timeout(connect_timeout + command_timeout, connect) => r,
        };
        let (mut conn, sharded) = match after_connect(connected, &shutdown, &mut backoff).await {
            Step::Ready(c) => c,
            Step::Retry => continue,
            Step::Stop => return,
        };
        let mut channels = Channels {
            conn: &mut conn,
            sharded,
            command_timeout,
        };
        // Every channel that has waiters, subscribed on its slot's node.
        let wanted = shared.channels();
        let mut ok = true;
        for (name, generation) in &wanted {
            if !channels.subscribe(&shared, name, *generation).await {
                ok = false;
                break;
            }
        }
        if !ok {
            if sleep_or_shutdown(&shutdown, backoff).await {
                return;
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            continue;
        }
        // Unlocks published while we were away were missed: every waiter
        // retries once.
        for ch in shared.state().channels.values() {
            ch.wake_all();
        }
        backoff = MIN_BACKOFF;
        tracing::debug!(
            channels = wanted.len(),
            sharded,
            "lock pub/sub (cluster) connected"
        );

        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                command = commands.recv() => match command {
                    None => return,
                    Some(Command::Subscribe { channel, generation }) => {
                        if shared.wants(&channel, generation)
                            && !channels.subscribe(&shared, &channel, generation).await
                        {
                            break;
                        }
                    }
                    Some(Command::Unsubscribe { channel }) => {
                        if shared.state().channels.contains_key(&channel) {
                            continue;
                        }
                        if channels.unsubscribe(&channel).await.is_err() {
                            break;
                        }
                    }
                },
                push = pushes.recv() => match push {
                    None => break,
                    Some(push) => {
                        if !channels.on_push(&shared, push).await {
                            break;
                        }
                    }
                },
            }
        }
        tracing::warn!("lock pub/sub (cluster) connection lost; waiters fall back to TTL-bounded retries while it reconnects");
        shared.disconnected();
    }
}

/// The subscribing side of the hub's cluster connection.
struct Channels<'a> {
    conn: &'a mut redis::cluster_async::ClusterConnection,
    sharded: bool,
    command_timeout: Duration,
}

impl Channels<'_> {
    /// Subscribes `channel`; false when the connection failed (a refusal
    /// by the ACL is told to the channel's waiters, and is not a failure).
    async fn subscribe(&mut self, shared: &Shared, channel: &str, generation: u64) -> bool {
        let sent = if self.sharded {
            tokio::time::timeout(self.command_timeout, self.conn.ssubscribe(channel)).await
        } else {
            tokio::time::timeout(self.command_timeout, self.conn.subscribe(channel)).await
        };
        match sent {
            Ok(Ok(())) => {
                shared.mark_live(channel, generation);
                true
            }
            Ok(Err(e)) if super::is_denied(&e) => {
                shared.deny(channel, generation, &e);
                true
            }
            Ok(Err(e)) => {
                tracing::debug!(channel, error = %e, "lock channel subscription failed");
                false
            }
            Err(_) => false,
        }
    }

    async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        let sent = if self.sharded {
            tokio::time::timeout(self.command_timeout, self.conn.sunsubscribe(channel)).await
        } else {
            tokio::time::timeout(self.command_timeout, self.conn.unsubscribe(channel)).await
        };
        sent.unwrap_or_else(|_| {
            Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "unsubscribe timed out",
            )))
        })
    }

    /// Handles one push; false when the connection is gone.
    async fn on_push(&mut self, shared: &Shared, push: PushInfo) -> bool {
        match push.kind {
            PushKind::Message | PushKind::SMessage => {
                if let [channel, payload, ..] = push.data.as_slice() {
                    if let (Some(channel), Some(payload)) = (bytes(channel), bytes(payload)) {
                        shared.dispatch(&String::from_utf8_lossy(channel), payload);
                    }
                }
                true
            }
            // The server ended a shard subscription: its slot moved (or
            // this is the confirmation of our own unsubscribe, for a
            // channel nobody waits on any more).
            PushKind::SUnsubscribe => {
                let Some(channel) = push.data.first().and_then(bytes) else {
                    return true;
                };
                let channel = String::from_utf8_lossy(channel).into_owned();
                let Some(generation) = shared.generation_of(&channel) else {
                    return true;
                };
                tracing::debug!(
                    channel,
                    "lock channel unsubscribed by the server (its slot moved); subscribing again"
                );
                shared.moved(&channel);
                self.subscribe(shared, &channel, generation).await
            }
            PushKind::Disconnection => {
                // redis-rs reconnects the node and subscribes its channels
                // again; meanwhile waiters retry on their PTTL.
                shared.disconnected();
                for (channel, generation) in shared.channels() {
                    if !self.subscribe(shared, &channel, generation).await {
                        return false;
                    }
                }
                true
            }
            _ => true,
        }
    }
}

fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}
