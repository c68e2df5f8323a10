//! The expansion: the annotated fn with its body wrapped in a lock.
//!
//! The signature is kept as written; only the body is replaced. The new
//! body builds the key from the arguments, makes the lock handle (both
//! before anything is awaited), pins the original body as an `async move`
//! block in the fn's own future, and hands it to a support function of
//! lock-core's hidden `__private` module that opens a lock context when
//! none is open, acquires, runs the body and releases.

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{AttrStyle, Ident, ItemFn, ReturnType, TraitItemFn, Type};

use crate::args::{Args, LockKind};
use crate::signature::{self, Mode};
use crate::template::{KeyTemplate, Segment};

/// Expands `#[distributed_lock(args)] item`. Never panics: a misuse is a
/// compile error emitted together with the unchanged item, so that the rest
/// of the code (and the editor) still sees the fn.
pub(crate) fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let func = match syn::parse2::<ItemFn>(item.clone()) {
        Ok(func) => func,
        Err(err) => {
            return with_item(not_a_fn(err, item.clone(), "distributed_lock"), item);
        }
    };
    match expand(args, &func) {
        Ok(tokens) => tokens,
        Err(err) => with_item(err, item),
    }
}

pub(crate) fn with_item(err: syn::Error, item: TokenStream) -> TokenStream {
    let err = err.to_compile_error();
    quote!(#err #item)
}

/// The error for an item that is not a fn with a body, for the attribute
/// `attribute` (`distributed_lock`, `leader_only`).
pub(crate) fn not_a_fn(err: syn::Error, item: TokenStream, attribute: &str) -> syn::Error {
    match syn::parse2::<TraitItemFn>(item) {
        Ok(decl) if decl.default.is_none() => syn::Error::new_spanned(
            &decl.sig.ident,
            format!(
                "#[{attribute}] needs a fn body: put it on the method in the impl block, \
                 not on the trait's declaration"
            ),
        ),
        _ => syn::Error::new(
            err.span(),
            format!("#[{attribute}] goes on an `async fn`: {err}"),
        ),
    }
}

/// Parses the arguments, checks them against the fn, and builds the fn.
/// Problems found in both the arguments and the fn are reported together.
fn expand(args: TokenStream, func: &ItemFn) -> syn::Result<TokenStream> {
    let args = match syn::parse2::<Args>(args) {
        Ok(args) => args,
        Err(mut err) => {
            // The return type cannot be judged without `skip_if_locked`.
            if let Err(not_async) = signature::check_async(&func.sig, "distributed_lock") {
                err.combine(not_async);
            }
            return Err(err);
        }
    };
    let flags = signature::Flags {
        skip_if_locked: args.skip_if_locked.as_ref(),
        cancel_on_lost: args.cancel_on_lost.as_ref(),
    };
    let mode = signature::mode(&func.sig, flags);
    let names = signature::argument_names(&func.sig);
    let private = private_path(&args);
    let key = if args.more_keys.is_empty() {
        template_expr(&args.key, &private, &names, &func.sig.ident)
    } else {
        // `key = [..]`: the keys as one array of `&str`.
        std::iter::once(&args.key)
            .chain(&args.more_keys)
            .map(|t| {
                let expr = template_expr(t, &private, &names, &func.sig.ident)?;
                let span = t.lit.span();
                Ok(quote_spanned!(span=> #private::key_str(#expr)))
            })
            .collect::<syn::Result<Vec<_>>>()
            .map(|keys| quote!(&[#(#keys),*]))
    };
    match (mode, key) {
        (Ok(mode), Ok(key)) => Ok(build(func, &args, mode, key)),
        (Err(mut err), Err(key_err)) => {
            err.combine(key_err);
            Err(err)
        }
        (Err(err), _) | (_, Err(err)) => Err(err),
    }
}

/// The expression that builds the key (or `#[leader_only]`'s election
/// name or value), a `&str`: a string literal when the template has no
/// placeholders, else a `&format!` of the arguments (`Display`), spanned at
/// the template so that type errors point at it.
pub(crate) fn template_expr(
    template: &KeyTemplate,
    private: &TokenStream,
    names: &[String],
    fn_name: &Ident,
) -> syn::Result<TokenStream> {
    let lit = &template.lit;
    let span = lit.span();
    let mut values = Vec::new();
    for path in template.fields() {
        let Some(first) = path.first() else { continue };
        if !names.iter().any(|n| n == first) {
            let known = if names.is_empty() {
                format!("`{fn_name}` has no arguments")
            } else {
                format!(
                    "the arguments of `{fn_name}` are {}",
                    names
                        .iter()
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            return Err(syn::Error::new_spanned(
                lit,
                format!(
                    "unknown name `{first}` in the {} template: {known}",
                    template.kind.word()
                ),
            ));
        }
        values.push(field_access(path, span));
    }
    if values.is_empty() {
        let text: String = template
            .segments
            .iter()
            .map(|s| match s {
                Segment::Text(t) => t.as_str(),
                Segment::Field(_) => "",
            })
            .collect();
        return Ok(quote_spanned!(span=> #text));
    }
    let format = template.format_string();
    Ok(quote_spanned!(span=> &#private::format!(#format, #(#values),*)))
}

/// `order.id` as tokens: the argument (or `self`), then each field.
fn field_access(path: &[String], span: Span) -> TokenStream {
    let mut tokens = TokenStream::new();
    for (i, part) in path.iter().enumerate() {
        if i > 0 {
            tokens.extend(quote_spanned!(span=> .));
        }
        if let Ok(index) = part.parse::<u32>() {
            let index = syn::Index { index, span };
            tokens.extend(quote!(#index));
        } else if part == "self" {
            tokens.extend(quote_spanned!(span=> self));
        } else {
            let ident = Ident::new(part, span);
            tokens.extend(quote!(#ident));
        }
    }
    tokens
}

fn private_path(args: &Args) -> TokenStream {
    private_of(&args.krate)
}

/// `krate::__private`: where the generated code's support functions are.
pub(crate) fn private_of(krate: &syn::Path) -> TokenStream {
    quote!(#krate::__private)
}

/// The fn with its new body.
fn build(func: &ItemFn, args: &Args, mode: Mode, key: TokenStream) -> TokenStream {
    let private = private_path(args);
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = func;

    // The exclusive lock (the default) keeps the calls it always had; a
    // side of the read-write lock names its mode; `permits` (never with
    // `mode`) takes a semaphore instead.
    let side = match args.kind {
        LockKind::Exclusive | LockKind::Fair => None,
        LockKind::Read => Some(quote!(#private::LockMode::Read)),
        LockKind::Write => Some(quote!(#private::LockMode::Write)),
    };
    let client = args.client.as_ref();
    let multi = !args.more_keys.is_empty();
    let handle = match &args.permits {
        Some(permits) => permit_handle(&private, client, &key, permits.count),
        None if multi => multi_handle(&private, client, &key),
        None if args.kind == LockKind::Fair => fair_handle(&private, client, &key),
        None => lock_handle(&private, client, &key, side),
    };

    let mut options = quote!(#private::AcquireOptions::new());
    match (&args.wait, &args.skip_if_locked) {
        (Some(wait), _) => {
            let ms = wait.millis;
            options = quote!(#options.wait(#private::Duration::from_millis(#ms)));
        }
        (None, Some(_)) => options = quote!(#options.no_wait()),
        (None, None) => {}
    }
    if let Some(lease) = &args.lease {
        let ms = lease.millis;
        options = quote!(#options.lease(#private::Duration::from_millis(#ms)));
    }

    let runner = match (mode, args.permits.is_some()) {
        _ if multi => match mode {
            Mode::Fail => quote!(multi_locked),
            Mode::CancelOnLost => quote!(multi_locked_cancel_on_lost),
            Mode::Skip => quote!(multi_locked_or_skip),
            Mode::SkipResult => quote!(multi_locked_or_skip_result),
        },
        (Mode::Fail, false) => quote!(locked),
        (Mode::CancelOnLost, false) => quote!(locked_cancel_on_lost),
        (Mode::Skip, false) => quote!(locked_or_skip),
        (Mode::SkipResult, false) => quote!(locked_or_skip_result),
        (Mode::Fail, true) => quote!(permitted),
        (Mode::CancelOnLost, true) => quote!(permitted_cancel_on_lost),
        (Mode::Skip, true) => quote!(permitted_or_skip),
        (Mode::SkipResult, true) => quote!(permitted_or_skip_result),
    };
    // Tells type inference what the body returns, so that `?` and `return`
    // inside the `async move` block convert to the fn's return type.
    let output = match &sig.output {
        ReturnType::Default => quote!(()),
        ReturnType::Type(_, ty) => {
            let mut ty = (**ty).clone();
            InferImplTrait.visit_type_mut(&mut ty);
            quote!(#ty)
        }
    };
    // Spanned at the return type: an error type without
    // `From<lock_core::Error>` is reported there.
    let return_span = match &sig.output {
        ReturnType::Default => sig.ident.span(),
        ReturnType::Type(_, ty) => ty.span(),
    };
    let call = respan(
        quote!(#private::#runner(__lock_handle, __lock_options, __lock_body).await),
        return_span,
    );

    // The body's own statements, spliced into the `async move` block rather
    // than nested as a block in it: a one-expression body such as
    // `{ Ok(id) }` would otherwise be a block in tail position, which rustc
    // flags as `unused_braces` (with a suggestion that does not compile).
    // syn keeps the body's inner attributes (`#![allow(..)]`) with the fn's
    // attributes; they go back at the top of the new body.
    let outer = attrs.iter().filter(|a| matches!(a.style, AttrStyle::Outer));
    let inner = attrs
        .iter()
        .filter(|a| matches!(a.style, AttrStyle::Inner(_)));
    let stmts = &block.stmts;

    quote! {
        #(#outer)*
        #vis #sig {
            #(#inner)*
            let __lock_handle = #handle;
            let __lock_options = #options;
            // Pinned here, in the fn's own future: the support function gets a
            // pointer, so the body's state is stored once, not once per layer.
            let __lock_body = #private::pin!(async move {
                // Never runs; gives the block its output type, so that `?`
                // and `return` in the body convert to the fn's return type.
                // A closure that is never called rather than a diverging
                // expression: nothing here is unreachable, so no lint fires
                // and no `#[allow]` is needed (which a crate's
                // `#![forbid(..)]` would reject).
                if false {
                    let __lock_output = || -> #output { loop {} };
                    return __lock_output();
                }
                #(#stmts)*
            });
            #call
        }
    }
}

/// The lock handle: the exclusive lock `key` (the default keeps the calls
/// it always had), or with `side` that side of the read-write lock `key`.
fn lock_handle(
    private: &TokenStream,
    client: Option<&syn::Expr>,
    key: &TokenStream,
    side: Option<TokenStream>,
) -> TokenStream {
    match (client, side) {
        (Some(client), None) => {
            let client = quote_spanned!(client.span()=> &(#client));
            quote!(#private::client_lock(#client, #key))
        }
        (Some(client), Some(side)) => {
            let client = quote_spanned!(client.span()=> &(#client));
            quote!(#private::client_rw_lock(#client, #key, #side))
        }
        (None, None) => quote!(#private::default_lock(#key)),
        (None, Some(side)) => quote!(#private::default_rw_lock(#key, #side)),
    }
}

/// `mode = "fair"`: the fair lock `key`.
fn fair_handle(
    private: &TokenStream,
    client: Option<&syn::Expr>,
    key: &TokenStream,
) -> TokenStream {
    match client {
        Some(client) => {
            let client = quote_spanned!(client.span()=> &(#client));
            quote!(#private::client_fair_lock(#client, #key))
        }
        None => quote!(#private::default_fair_lock(#key)),
    }
}

/// `key = [..]`: the multi-lock of the keys (`keys`: an array of `&str`).
fn multi_handle(
    private: &TokenStream,
    client: Option<&syn::Expr>,
    keys: &TokenStream,
) -> TokenStream {
    match client {
        Some(client) => {
            let client = quote_spanned!(client.span()=> &(#client));
            quote!(#private::client_multi_lock(#client, #keys))
        }
        None => quote!(#private::default_multi_lock(#keys)),
    }
}

/// `permits = N`: the handle on the expirable semaphore `key` of `count`
/// permits.
fn permit_handle(
    private: &TokenStream,
    client: Option<&syn::Expr>,
    key: &TokenStream,
    count: u64,
) -> TokenStream {
    match client {
        Some(client) => {
            let client = quote_spanned!(client.span()=> &(#client));
            quote!(#private::client_permits(#client, #key, #count))
        }
        None => quote!(#private::default_permits(#key, #count)),
    }
}

/// Gives every token of `tokens` the span `span`.
pub(crate) fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tree| {
            if let TokenTree::Group(group) = &tree {
                let mut inner = Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(span);
                tree = TokenTree::Group(inner);
            } else {
                tree.set_span(span);
            }
            tree
        })
        .collect()
}

/// Replaces `impl Trait` with `_`: a `let` cannot name an opaque type.
pub(crate) struct InferImplTrait;

impl VisitMut for InferImplTrait {
    fn visit_type_mut(&mut self, ty: &mut Type) {
        if let Type::ImplTrait(impl_trait) = ty {
            *ty = Type::Infer(syn::TypeInfer {
                underscore_token: syn::Token![_](impl_trait.span()),
            });
            return;
        }
        syn::visit_mut::visit_type_mut(self, ty);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(args: TokenStream, item: TokenStream) -> String {
        distributed_lock(args, item).to_string()
    }

    #[test]
    fn keeps_the_signature_and_wraps_the_body() {
        let out = expand_str(
            quote!(key = "stock:{sku}"),
            quote!(
                /// Buys.
                #[inline]
                pub async fn buy<T: Clone>(sku: &str, qty: u32) -> Result<u32, ShopError>
                where
                    T: Send,
                {
                    Ok(qty)
                }
            ),
        );
        for part in [
            "# [doc = r\" Buys.\"]",
            "# [inline]",
            "pub async fn buy < T : Clone > (sku : & str , qty : u32) -> Result < u32 , ShopError > where T : Send",
            ":: lock_core :: __private :: default_lock (& :: lock_core :: __private :: format ! (\"stock:{}\" , sku))",
            "let __lock_body = :: lock_core :: __private :: pin ! (async move",
            ":: lock_core :: __private :: locked (__lock_handle , __lock_options , __lock_body) . await",
            "let __lock_output = || -> Result < u32 , ShopError > { loop { } } ;",
            "return __lock_output () ; } Ok (qty) }) ;",
        ] {
            assert!(out.contains(part), "missing `{part}` in\n{out}");
        }
        assert!(!out.contains("compile_error"), "{out}");
        // No `#[allow]` that could hide (or, under `forbid`, reject) a lint.
        assert!(!out.contains("allow"), "{out}");
    }

    #[test]
    fn options_become_acquire_options() {
        let out = expand_str(
            quote!(
                key = "order:{order.id}:{self.shop}",
                wait = "5s",
                lease = "30s",
                client = self.locks.clone(),
                crate = "::facade::locks"
            ),
            quote!(
                async fn pay(&self, order: &Order) -> Result<(), PayError> {
                    Ok(())
                }
            ),
        );
        for part in [
            ":: facade :: locks :: __private :: client_lock (& (self . locks . clone ())",
            "format ! (\"order:{}:{}\" , order . id , self . shop)",
            "AcquireOptions :: new () . wait (:: facade :: locks :: __private :: Duration :: from_millis (5000u64)) . lease (:: facade :: locks :: __private :: Duration :: from_millis (30000u64))",
        ] {
            assert!(out.contains(part), "missing `{part}` in\n{out}");
        }
    }

    #[test]
    fn mode_takes_a_side_of_the_read_write_lock() {
        let item = quote!(
            async fn price(sku: &str) -> Result<u32, E> {
                Ok(1)
            }
        );
        let out = expand_str(quote!(key = "price:{sku}", mode = "read"), item.clone());
        assert!(
            out.contains(":: lock_core :: __private :: default_rw_lock (& :: lock_core :: __private :: format ! (\"price:{}\" , sku) , :: lock_core :: __private :: LockMode :: Read)"),
            "{out}"
        );
        assert!(
            out.contains(":: lock_core :: __private :: locked (__lock_handle"),
            "{out}"
        );
        let out = expand_str(
            quote!(
                key = "price:{sku}",
                mode = "write",
                client = &self.locks,
                skip_if_locked
            ),
            quote!(
                async fn reprice(&self, sku: &str) {}
            ),
        );
        assert!(
            out.contains("client_rw_lock (& (& self . locks) , & :: lock_core :: __private :: format ! (\"price:{}\" , sku) , :: lock_core :: __private :: LockMode :: Write)"),
            "{out}"
        );
        assert!(
            out.contains("AcquireOptions :: new () . no_wait ()"),
            "{out}"
        );
        // "exclusive" is the default, spelled out: the same code as without `mode`.
        let default = expand_str(quote!(key = "price:{sku}"), item.clone());
        let spelled = expand_str(quote!(key = "price:{sku}", mode = "exclusive"), item);
        assert_eq!(default, spelled);
        assert!(default.contains("default_lock (&"), "{default}");
        assert!(!default.contains("LockMode"), "{default}");
    }

    #[test]
    fn permits_take_a_semaphore_and_change_nothing_else() {
        let item = quote!(
            async fn export(&self, day: u32) -> Result<u32, E> {
                Ok(day)
            }
        );
        // Against the lock's expansion of the same fn and options: only the
        // handle and the runner differ.
        for (options, lock_runner, permit_runner) in [
            (quote!(), "locked (", "permitted ("),
            (
                quote!(, wait = "2s", lease = "1m"),
                "locked (",
                "permitted (",
            ),
            (
                quote!(, cancel_on_lost),
                "locked_cancel_on_lost (",
                "permitted_cancel_on_lost (",
            ),
        ] {
            let locked = expand_str(quote!(key = "export:{day}" #options), item.clone());
            let permitted = expand_str(
                quote!(key = "export:{day}", permits = 3 #options),
                item.clone(),
            );
            let key = ":: lock_core :: __private :: format ! (\"export:{}\" , day)";
            let expected = locked
                .replace(
                    &format!(":: lock_core :: __private :: default_lock (& {key})"),
                    &format!(":: lock_core :: __private :: default_permits (& {key} , 3u64)"),
                )
                .replace(lock_runner, permit_runner);
            assert_ne!(expected, locked, "{locked}");
            assert_eq!(permitted, expected);
        }
        let out = expand_str(
            quote!(
                key = "jobs",
                permits = 2,
                client = &self.locks,
                skip_if_locked
            ),
            quote!(
                async fn job(&self) -> Option<u8> {
                    None
                }
            ),
        );
        assert!(
            out.contains(":: lock_core :: __private :: client_permits (& (& self . locks) , \"jobs\" , 2u64)"),
            "{out}"
        );
        assert!(
            out.contains("AcquireOptions :: new () . no_wait ()"),
            "{out}"
        );
        assert!(out.contains("permitted_or_skip (__lock_handle"), "{out}");
        let out = expand_str(
            quote!(key = "jobs", permits = 2, skip_if_locked, wait = "1s"),
            quote!(
                async fn job() -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(
            out.contains("permitted_or_skip_result (__lock_handle"),
            "{out}"
        );
        // Without `permits`, nothing of it.
        let out = expand_str(quote!(key = "jobs"), item);
        assert!(!out.contains("permit"), "{out}");
    }

    #[test]
    fn skip_if_locked_tries_once_unless_told_to_wait() {
        let out = expand_str(
            quote!(key = "nightly-report", skip_if_locked),
            quote!(
                async fn nightly() {}
            ),
        );
        assert!(out.contains("default_lock (\"nightly-report\")"), "{out}");
        assert!(
            out.contains("AcquireOptions :: new () . no_wait ()"),
            "{out}"
        );
        assert!(out.contains("locked_or_skip (__lock_handle"), "{out}");
        let out = expand_str(
            quote!(key = "n", skip_if_locked, wait = "250ms"),
            quote!(
                async fn nightly() -> Result<Option<u8>, E> {
                    Ok(None)
                }
            ),
        );
        assert!(
            out.contains(". wait (:: lock_core :: __private :: Duration :: from_millis (250u64))"),
            "{out}"
        );
        assert!(
            out.contains("locked_or_skip_result (__lock_handle"),
            "{out}"
        );
    }

    #[test]
    fn impl_trait_in_the_return_type_is_inferred() {
        let out = expand_str(
            quote!(key = "k"),
            quote!(
                async fn f() -> Result<impl Display, E> {
                    Ok(1)
                }
            ),
        );
        assert!(
            out.contains("let __lock_output = || -> Result < _ , E >"),
            "{out}"
        );
    }

    #[test]
    fn errors_come_with_the_unchanged_item() {
        let item = quote!(
            fn not_async() -> Result<(), E> {
                Ok(())
            }
        );
        let out = expand_str(quote!(key = "k", wait = "soon"), item.clone());
        assert!(out.contains("compile_error"), "{out}");
        assert!(out.contains("invalid duration"), "{out}");
        assert!(out.contains("make `not_async` async"), "{out}");
        assert!(out.ends_with(&item.to_string()), "{out}");

        let out = expand_str(
            quote!(key = "{nope}"),
            quote!(
                async fn f(a: u8) -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(
            out.contains("unknown name `nope` in the key template: the arguments of `f` are `a`"),
            "{out}"
        );

        let out = expand_str(
            quote!(key = "k"),
            quote!(
                async fn declared(&self) -> Result<(), E>;
            ),
        );
        assert!(
            out.contains("put it on the method in the impl block"),
            "{out}"
        );

        let out = expand_str(
            quote!(key = "k"),
            quote!(
                struct NotAFn;
            ),
        );
        assert!(out.contains("goes on an `async fn`"), "{out}");
    }
    #[test]
    fn odd_templates_are_errors_or_code_never_a_panic() {
        let item = quote!(
            async fn f(a: (u8, u8), r#type: u8) -> Result<(), E> {
                Ok(())
            }
        );
        for template in [
            "{a.0}",
            "{a.type}",
            "{a.self}",
            "{a.crate}",
            "{a.4294967296}",
            "{type}",
            "{r#type}",
            "{a.0.1.2}",
            "{{}}",
            "}}{{",
            "{{{a}}}",
        ] {
            let lit = syn::LitStr::new(template, Span::call_site());
            let _ = expand_str(quote!(key = #lit), item.clone());
        }
    }

    #[test]
    fn a_list_of_keys_takes_a_multi_lock_of_every_key() {
        let item = quote!(
            async fn transfer(from: u32, to: u32) -> Result<(), E> {
                Ok(())
            }
        );
        for (options, runner) in [
            (quote!(), "multi_locked ("),
            (quote!(, cancel_on_lost), "multi_locked_cancel_on_lost ("),
        ] {
            let out = expand_str(
                quote!(key = ["account:{from}", "account:{to}", "ledger"] #options),
                item.clone(),
            );
            let p = ":: lock_core :: __private ::";
            assert!(
                out.contains(&format!(
                    "{p} default_multi_lock (& [{p} key_str (& {p} format ! (\"account:{{}}\" , from)) , \
                     {p} key_str (& {p} format ! (\"account:{{}}\" , to)) , {p} key_str (\"ledger\")])"
                )),
                "{out}"
            );
            assert!(out.contains(&format!("{p} {runner}")), "{out}");
        }
        let out = expand_str(
            quote!(key = ["a", "b"], client = &self.locks, skip_if_locked),
            quote!(
                async fn job(&self) -> Option<u8> {
                    None
                }
            ),
        );
        assert!(
            out.contains("client_multi_lock (& (& self . locks) , & ["),
            "{out}"
        );
        assert!(out.contains("multi_locked_or_skip ("), "{out}");
        // an unknown name in any key is an error on its template
        let out = expand_str(
            quote!(key = ["a:{x}", "b:{nope}"]),
            quote!(
                async fn f(x: u8) {}
            ),
        );
        assert!(out.contains("unknown name `nope`"), "{out}");
    }
}
