//! The middleware: [`LockLayer`], the [`Lock`] service it makes and the
//! [`ResponseFuture`] that takes the lock.
//!
//! # Usage
//!
//! See the [crate docs](crate) for `ServiceBuilder`, axum `Router::route_layer`
//! and tonic `Server::builder().layer`.

mod future;
mod layer;
mod service;
mod settings;

pub(crate) use future::in_context;
pub use future::ResponseFuture;
pub use layer::{LockLayer, DEFAULT_WAIT};
pub use service::Lock;
pub(crate) use settings::{Settings, Shared};
