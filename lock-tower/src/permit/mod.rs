//! The per-key concurrency limit: [`PermitLayer`], the [`PermitLimit`]
//! service it makes, the [`PermitFuture`] that takes a permit, and the
//! [`RequestPermit`] the handler sees.
//!
//! # Usage
//!
//! See the [crate docs](crate), "Per-key concurrency limit".

mod flavour;
mod future;
mod handle;
mod layer;
mod seed;
mod service;

#[cfg(feature = "tonic")]
mod grpc;
#[cfg(feature = "http")]
mod http;

pub use flavour::{AttachPermit, PermitFlavour};
pub use future::PermitFuture;
pub use handle::RequestPermit;
pub use layer::{PermitLayer, DEFAULT_PERMIT_WAIT};
pub use service::PermitLimit;
