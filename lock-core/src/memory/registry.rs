//! The in-memory servers of this process by name: what a `memory://<name>`
//! URL connects to. A server lives while a handle or a client of it lives;
//! a name whose server is gone names a new, empty one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::Server;

fn servers() -> &'static Mutex<HashMap<String, Weak<Server>>> {
    static SERVERS: OnceLock<Mutex<HashMap<String, Weak<Server>>>> = OnceLock::new();
    SERVERS.get_or_init(Mutex::default)
}

/// The live server called `name`, or a new one registered under it.
pub(crate) fn named(name: &str) -> Arc<Server> {
    let mut servers = servers().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(server) = servers.get(name).and_then(Weak::upgrade) {
        return server;
    }
    // Forget the names of servers that are gone.
    servers.retain(|_, server| server.strong_count() > 0);
    let server = Arc::new(Server::new());
    servers.insert(name.to_owned(), Arc::downgrade(&server));
    server
}

/// Registers `name` for `server` too (an alias: clients connected by it
/// reach the same server, and an interposed network tells them apart).
pub(crate) fn alias(name: &str, server: &Arc<Server>) {
    let mut servers = servers().lock().unwrap_or_else(|p| p.into_inner());
    servers.retain(|_, server| server.strong_count() > 0);
    servers.insert(name.to_owned(), Arc::downgrade(server));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_name_one_server_while_it_lives() {
        let a = named("registry-test-a");
        let again = named("registry-test-a");
        assert!(Arc::ptr_eq(&a, &again));
        let other = named("registry-test-b");
        assert!(!Arc::ptr_eq(&a, &other));
        let weak = Arc::downgrade(&a);
        drop((a, again));
        assert!(weak.upgrade().is_none(), "nothing else keeps it");
        // The name now names a new, empty server.
        let fresh = named("registry-test-a");
        assert!(weak.upgrade().is_none());
        drop(fresh);
    }
}
