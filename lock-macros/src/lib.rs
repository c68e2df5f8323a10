//! `#[distributed_lock(key = "...")]`: docs to follow.
#![deny(missing_docs)]

mod args;
mod expand;
mod signature;
mod template;

use proc_macro::TokenStream;

/// Takes a distributed lock around an `async fn`.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::distributed_lock(args.into(), item.into()).into()
}
