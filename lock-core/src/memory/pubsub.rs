//! Pub/sub: classic channels (`PUBLISH`) and sharded channels
//! (`SPUBLISH`), kept apart as Redis keeps them (a message published on one
//! never reaches a subscriber of the other, even on one server).
//!
//! A subscriber is an unbounded channel of payloads: a message reaches
//! every subscriber that still holds its receiver when it is published, and
//! the publish answers how many did (Redis counts the clients it wrote the
//! message to). Dropping the receiver unsubscribes. Unbounded: a subscriber
//! that never reads keeps its messages (Redis would disconnect it once its
//! output buffer limit was reached).

use std::collections::BTreeMap;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// Which pub/sub namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Namespace {
    /// `SUBSCRIBE` / `PUBLISH`.
    Classic,
    /// `SSUBSCRIBE` / `SPUBLISH`.
    Sharded,
}

/// The subscribers of every channel.
#[derive(Debug, Default)]
pub(crate) struct PubSub {
    classic: BTreeMap<Vec<u8>, Vec<UnboundedSender<Vec<u8>>>>,
    sharded: BTreeMap<Vec<u8>, Vec<UnboundedSender<Vec<u8>>>>,
}

impl PubSub {
    fn channels(
        &mut self,
        namespace: Namespace,
    ) -> &mut BTreeMap<Vec<u8>, Vec<UnboundedSender<Vec<u8>>>> {
        match namespace {
            Namespace::Classic => &mut self.classic,
            Namespace::Sharded => &mut self.sharded,
        }
    }

    /// A new subscriber of `channel`: it receives each payload published
    /// there from now on.
    pub(crate) fn subscribe(
        &mut self,
        namespace: Namespace,
        channel: &[u8],
    ) -> UnboundedReceiver<Vec<u8>> {
        let (tx, rx) = unbounded_channel();
        self.channels(namespace)
            .entry(channel.to_vec())
            .or_default()
            .push(tx);
        rx
    }

    /// Delivers `message` to the subscribers of `channel`; how many got it.
    pub(crate) fn publish(&mut self, namespace: Namespace, channel: &[u8], message: &[u8]) -> i64 {
        let channels = self.channels(namespace);
        let Some(subscribers) = channels.get_mut(channel) else {
            return 0;
        };
        subscribers.retain(|tx| tx.send(message.to_vec()).is_ok());
        let told = subscribers.len();
        if told == 0 {
            channels.remove(channel);
        }
        i64::try_from(told).unwrap_or(i64::MAX)
    }

    /// How many subscribers `channel` has (`PUBSUB NUMSUB` / `SHARDNUMSUB`).
    pub(crate) fn count(&mut self, namespace: Namespace, channel: &[u8]) -> i64 {
        let channels = self.channels(namespace);
        let Some(subscribers) = channels.get_mut(channel) else {
            return 0;
        };
        subscribers.retain(|tx| !tx.is_closed());
        let count = subscribers.len();
        if count == 0 {
            channels.remove(channel);
        }
        i64::try_from(count).unwrap_or(i64::MAX)
    }

    /// Ends every subscription (a restart closes every connection): each
    /// receiver sees its channel closed once it has read what it was sent.
    pub(crate) fn close_all(&mut self) {
        self.classic.clear();
        self.sharded.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_counts_the_subscribers_that_got_it() {
        let mut ps = PubSub::default();
        let mut a = ps.subscribe(Namespace::Classic, b"ch");
        let b = ps.subscribe(Namespace::Classic, b"ch");
        let mut s = ps.subscribe(Namespace::Sharded, b"ch");
        assert_eq!(ps.publish(Namespace::Classic, b"ch", b"0"), 2);
        assert_eq!(a.try_recv().ok(), Some(b"0".to_vec()));
        assert!(s.try_recv().is_err(), "sharded subscribers are apart");
        drop(b);
        assert_eq!(ps.count(Namespace::Classic, b"ch"), 1);
        assert_eq!(ps.publish(Namespace::Sharded, b"ch", b"1"), 1);
        assert_eq!(s.try_recv().ok(), Some(b"1".to_vec()));
        assert_eq!(ps.publish(Namespace::Classic, b"other", b"x"), 0);
        ps.close_all();
        assert!(a.try_recv().is_err());
        assert_eq!(ps.publish(Namespace::Classic, b"ch", b"2"), 0);
    }
}
