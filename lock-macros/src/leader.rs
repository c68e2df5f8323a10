//! `#[leader_only(election = "...")]`: the body runs only while this
//! process leads the election, and again after a lost leadership.
//!
//! The signature is kept as written; only the body is replaced. The new
//! body builds the election's name and the leader's value from the
//! arguments and makes the election handle (all before anything is
//! awaited), then hands lock-core's `__private::leader_only` a closure that
//! makes one run of the original body: a fresh `async move` block over
//! clones of the arguments the body uses (a run dropped on a lost
//! leadership took its clones with it; the next run gets new ones). The
//! support function campaigns (`Election::run_as_leader`), runs the body
//! while leader, campaigns again after a loss and resigns when the body
//! returns.

use std::collections::HashSet;

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{AttrStyle, Expr, Ident, ItemFn, LitStr, Path, ReturnType, Token};

use crate::args::{crate_path, set_once, value};
use crate::expand::{not_a_fn, private_of, respan, template_expr, with_item, InferImplTrait};
use crate::signature::{self, Binding};
use crate::template::{KeyTemplate, TemplateKind};

/// The attribute's name, for messages.
const ATTRIBUTE: &str = "leader_only";

/// Every option the attribute takes, in the order the docs list them.
const OPTIONS: &str = "`election`, `value`, `client`, `crate`";

/// The parsed arguments of one `#[leader_only(...)]`.
#[derive(Debug)]
pub(crate) struct LeaderArgs {
    /// The election's name (the lock's name).
    pub(crate) election: KeyTemplate,
    /// What `Election::leader()` shows of this leader; `<hostname>:<pid>`
    /// when not given.
    pub(crate) value: Option<KeyTemplate>,
    pub(crate) client: Option<Expr>,
    /// The path to lock-core (`::lock_core` unless `crate = "..."`).
    pub(crate) krate: Path,
}

impl Parse for LeaderArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut election = None;
        let mut leader_value = None;
        let mut client = None;
        let mut krate = None;
        while !input.is_empty() {
            // `crate` is a keyword: accept any identifier, keywords included.
            let name = input.call(Ident::parse_any)?;
            match name.to_string().as_str() {
                "election" => {
                    let lit = value::<LitStr>(input)?;
                    let template = KeyTemplate::parse_as(&lit, TemplateKind::Election)?;
                    set_once(&mut election, template, &name)?;
                }
                "value" => {
                    let lit = value::<LitStr>(input)?;
                    let template = KeyTemplate::parse_as(&lit, TemplateKind::Value)?;
                    set_once(&mut leader_value, template, &name)?;
                }
                "client" => {
                    let expr = value::<Expr>(input)?;
                    set_once(&mut client, expr, &name)?;
                }
                "crate" => {
                    let path = crate_path(&value::<LitStr>(input)?)?;
                    set_once(&mut krate, path, &name)?;
                }
                "key" => {
                    return Err(syn::Error::new_spanned(
                        &name,
                        "#[leader_only] names its election with `election`: write \
                         election = \"...\" instead of key = \"...\"",
                    ))
                }
                other @ ("mode" | "permits" | "wait" | "lease" | "skip_if_locked"
                | "cancel_on_lost") => {
                    return Err(syn::Error::new_spanned(
                        &name,
                        format!(
                            "`{other}` is an option of #[distributed_lock], not of \
                             #[leader_only]; valid options: {OPTIONS} (the leadership is \
                             renewed by the client's watchdog while the body runs, and the \
                             body is cancelled when it is lost)"
                        ),
                    ))
                }
                _ => {
                    return Err(syn::Error::new_spanned(
                        &name,
                        format!("unknown option `{name}`; valid options: {OPTIONS}"),
                    ))
                }
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        let Some(election) = election else {
            return Err(syn::Error::new(
                Span::call_site(),
                "missing `election`: write #[leader_only(election = \"outbox-relay\")]",
            ));
        };
        Ok(LeaderArgs {
            election,
            value: leader_value,
            client,
            krate: krate.unwrap_or_else(|| syn::parse_quote!(::lock_core)),
        })
    }
}

/// Expands `#[leader_only(args)] item`. Never panics: a misuse is a compile
/// error emitted together with the unchanged item.
pub(crate) fn leader_only(args: TokenStream, item: TokenStream) -> TokenStream {
    let func = match syn::parse2::<ItemFn>(item.clone()) {
        Ok(func) => func,
        Err(err) => return with_item(not_a_fn(err, item.clone(), ATTRIBUTE), item),
    };
    match expand(args, &func) {
        Ok(tokens) => tokens,
        Err(err) => with_item(err, item),
    }
}

/// Parses the arguments, checks them against the fn, and builds the fn.
/// Problems found in both are reported together.
fn expand(args: TokenStream, func: &ItemFn) -> syn::Result<TokenStream> {
    let parsed = syn::parse2::<LeaderArgs>(args);
    let checked = check_signature(func);
    let args = match (parsed, checked) {
        (Ok(args), Ok(())) => args,
        (Err(mut err), Err(sig_err)) => {
            err.combine(sig_err);
            return Err(err);
        }
        (Err(err), Ok(())) | (Ok(_), Err(err)) => return Err(err),
    };
    let private = private_of(&args.krate);
    let names = signature::argument_names(&func.sig);
    let fn_name = &func.sig.ident;
    let election = template_expr(&args.election, &private, &names, fn_name);
    let leader_value = args
        .value
        .as_ref()
        .map(|v| template_expr(v, &private, &names, fn_name))
        .transpose();
    let used = used_bindings(func)?;
    match (election, leader_value) {
        (Ok(election), Ok(leader_value)) => {
            Ok(build(func, &args, &private, election, leader_value, &used))
        }
        (Err(mut err), Err(value_err)) => {
            err.combine(value_err);
            Err(err)
        }
        (Err(err), _) | (_, Err(err)) => Err(err),
    }
}

/// `async`, and a `Result` to carry a failed campaign.
fn check_signature(func: &ItemFn) -> syn::Result<()> {
    let sig = &func.sig;
    signature::check_async(sig, ATTRIBUTE)?;
    if signature::returns_result(sig) {
        return Ok(());
    }
    let (span, what) = match &sig.output {
        ReturnType::Default => (sig.ident.span(), format!("`{}` returns `()`", sig.ident)),
        ReturnType::Type(_, ty) => (
            ty.span(),
            format!("the return type of `{}` is not a `Result`", sig.ident),
        ),
    };
    Err(syn::Error::new(
        span,
        format!(
            "#[leader_only] reports a campaign that cannot succeed (no default client, an \
             invalid election name) as `Err`, but {what}: return `Result<T, E>` where \
             `E: From<lock_core::Error>` (an alias of `Result` is recognised when its name \
             ends in `Result`)"
        ),
    ))
}

/// The argument bindings the body names (each run gets a clone of them):
/// every binding whose identifier appears among the body's tokens, macro
/// arguments included. A binding that cannot be cloned (`&mut`, `self` by
/// value) and is used is an error on its use.
fn used_bindings(func: &ItemFn) -> syn::Result<Vec<Binding>> {
    let mut seen = HashSet::new();
    collect_idents(func.block.to_token_stream(), &mut seen);
    let mut used = Vec::new();
    let mut errors: Option<syn::Error> = None;
    for binding in signature::bindings_of(&func.sig) {
        let Some(span) = seen_span(&seen, &binding.ident) else {
            continue;
        };
        if let Some(what) = binding.not_clonable {
            let err = syn::Error::new(
                span,
                format!(
                    "#[leader_only] runs the body again after a lost leadership, each run with \
                     its own clone of the arguments the body uses, but `{}` is {what}: take \
                     `&self` or a shared reference, or an owned value that is `Clone`",
                    binding.ident
                ),
            );
            match &mut errors {
                Some(errors) => errors.combine(err),
                None => errors = Some(err),
            }
            continue;
        }
        used.push(binding);
    }
    match errors {
        Some(err) => Err(err),
        None => Ok(used),
    }
}

/// Every identifier in `tokens` (into groups), with the span of its first
/// occurrence.
fn collect_idents(tokens: TokenStream, seen: &mut HashSet<IdentAt>) {
    for tree in tokens {
        match tree {
            TokenTree::Ident(ident) => {
                seen.insert(IdentAt(ident));
            }
            TokenTree::Group(group) => collect_idents(group.stream(), seen),
            TokenTree::Punct(_) | TokenTree::Literal(_) => {}
        }
    }
}

/// An identifier compared by name only (the set keeps the first seen).
struct IdentAt(Ident);

impl PartialEq for IdentAt {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for IdentAt {}

impl std::hash::Hash for IdentAt {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_string().hash(state);
    }
}

fn seen_span(seen: &HashSet<IdentAt>, ident: &Ident) -> Option<Span> {
    seen.get(&IdentAt(ident.clone())).map(|i| i.0.span())
}

/// The fn with its new body.
fn build(
    func: &ItemFn,
    args: &LeaderArgs,
    private: &TokenStream,
    election: TokenStream,
    leader_value: Option<TokenStream>,
    used: &[Binding],
) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = func;

    let handle = match &args.client {
        Some(client) => {
            let client = quote_spanned!(client.span()=> &(#client));
            quote!(#private::client_election(#client, #election))
        }
        None => quote!(#private::default_election(#election)),
    };
    let leader_value = match leader_value {
        Some(v) => quote!(#private::leader_value(#v)),
        None => quote!(#private::default_leader_value()),
    };

    // Each run's own clones of the bindings the body uses (`self` is a
    // shared reference here, copied into each run as it is).
    let clones =
        used.iter()
            .filter(|b| b.ident != "self")
            .map(|Binding { ident, mutable, .. }| {
                let mutability = mutable.then(|| quote!(mut));
                quote_spanned!(ident.span()=>
                    let #mutability #ident = ::core::clone::Clone::clone(&#ident);
                )
            });
    // A `mut` argument the body changes is changed in the clones only: the
    // outer binding is borrowed mutably once so that `unused_mut` does not
    // fire on the signature as written.
    let keep_mut = signature::bindings_of(sig)
        .into_iter()
        .filter(|b| b.mutable)
        .map(|Binding { ident, .. }| quote!(let _ = &mut #ident;));

    let output = match &sig.output {
        ReturnType::Default => quote!(()),
        ReturnType::Type(_, ty) => {
            let mut ty = (**ty).clone();
            InferImplTrait.visit_type_mut(&mut ty);
            quote!(#ty)
        }
    };
    let return_span = match &sig.output {
        ReturnType::Default => sig.ident.span(),
        ReturnType::Type(_, ty) => ty.span(),
    };
    let call = respan(
        quote!(#private::leader_only(__leader_election, __leader_value, __leader_body).await),
        return_span,
    );

    let outer = attrs.iter().filter(|a| matches!(a.style, AttrStyle::Outer));
    let inner = attrs
        .iter()
        .filter(|a| matches!(a.style, AttrStyle::Inner(_)));
    let stmts = &block.stmts;

    quote! {
        #(#outer)*
        #vis #sig {
            #(#inner)*
            let __leader_election = #handle;
            let __leader_value = #leader_value;
            #(#keep_mut)*
            // One run of the body per call: after a lost leadership the
            // run is dropped and the next one starts from the beginning.
            let __leader_body = move || {
                #(#clones)*
                async move {
                    // Never runs; gives the block its output type, so that
                    // `?` and `return` in the body convert to the fn's
                    // return type (see #[distributed_lock]).
                    if false {
                        let __lock_output = || -> #output { loop {} };
                        return __lock_output();
                    }
                    #(#stmts)*
                }
            };
            #call
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(args: TokenStream, item: TokenStream) -> String {
        leader_only(args, item).to_string()
    }

    fn err(tokens: TokenStream) -> String {
        match syn::parse2::<LeaderArgs>(tokens) {
            Ok(args) => panic!("expected an error, got {args:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn parses_every_option() {
        let args = syn::parse2::<LeaderArgs>(quote!(
            election = "relay:{region}",
            value = "{host}",
            client = self.locks.clone(),
            crate = "::facade::locks",
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(args.election.kind, TemplateKind::Election);
        assert!(args.value.is_some());
        assert!(args.client.is_some());
        let krate = &args.krate;
        assert_eq!(quote!(#krate).to_string(), ":: facade :: locks");
        let bare =
            syn::parse2::<LeaderArgs>(quote!(election = "relay")).unwrap_or_else(|e| panic!("{e}"));
        assert!(bare.value.is_none() && bare.client.is_none());
    }

    #[test]
    fn rejects_misuse_with_a_clear_message() {
        assert!(err(quote!()).contains("missing `election`"));
        assert!(err(quote!(value = "v")).contains("missing `election`"));
        assert!(err(quote!(key = "a")).contains("write election = \"...\" instead of key"));
        assert!(err(quote!(election = "a", wait = "1s"))
            .contains("`wait` is an option of #[distributed_lock], not of #[leader_only]"));
        assert!(err(quote!(election = "a", cancel_on_lost)).contains("not of #[leader_only]"));
        assert!(err(quote!(election = "a", frob = 1))
            .contains("unknown option `frob`; valid options: `election`, `value`"));
        assert!(err(quote!(election = "a", election = "b")).contains("duplicate option"));
        assert!(err(quote!(election = "")).contains("the election name must not be empty"));
        assert!(err(quote!(election = "a", value = "")).contains("value must not be empty"));
        assert!(err(quote!(election = "a{")).contains("unclosed `{` in the election template"));
        assert!(err(quote!(election = "a", value = "{x:?}")).contains("in the value template"));
        assert!(err(quote!(election = relay)).contains("expected string literal"));
    }

    #[test]
    fn wraps_the_body_in_a_run_per_leadership() {
        let out = expand_str(
            quote!(election = "relay:{region}", value = "{host}:{id}"),
            quote!(
                /// Relays.
                pub async fn relay(
                    region: &str,
                    host: String,
                    id: u32,
                    unused: Conn,
                ) -> Result<u32, JobError> {
                    let n = id + host.len() as u32;
                    Ok(n)
                }
            ),
        );
        for part in [
            "# [doc = r\" Relays.\"]",
            "pub async fn relay (region : & str , host : String , id : u32 , unused : Conn ,) -> Result < u32 , JobError >",
            "let __leader_election = :: lock_core :: __private :: default_election (& :: lock_core :: __private :: format ! (\"relay:{}\" , region)) ;",
            "let __leader_value = :: lock_core :: __private :: leader_value (& :: lock_core :: __private :: format ! (\"{}:{}\" , host , id)) ;",
            "let __leader_body = move || { let host = :: core :: clone :: Clone :: clone (& host) ; let id = :: core :: clone :: Clone :: clone (& id) ; async move {",
            "let __lock_output = || -> Result < u32 , JobError > { loop { } } ;",
            ":: lock_core :: __private :: leader_only (__leader_election , __leader_value , __leader_body) . await",
        ] {
            assert!(out.contains(part), "missing `{part}` in\n{out}");
        }
        // Arguments the body does not name are not cloned.
        assert!(!out.contains("clone (& region)"), "{out}");
        assert!(!out.contains("clone (& unused)"), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
        assert!(!out.contains("allow"), "{out}");
    }

    #[test]
    fn client_default_value_and_mut_bindings() {
        let out = expand_str(
            quote!(
                election = "jobs",
                client = self.locks.clone(),
                crate = "::facade::locks"
            ),
            quote!(
                async fn run(&self, mut budget: u32) -> Result<(), E> {
                    budget -= 1;
                    self.spend(budget).await
                }
            ),
        );
        for part in [
            ":: facade :: locks :: __private :: client_election (& (self . locks . clone ()) , \"jobs\")",
            ":: facade :: locks :: __private :: default_leader_value ()",
            "let _ = & mut budget ;",
            "let mut budget = :: core :: clone :: Clone :: clone (& budget) ;",
        ] {
            assert!(out.contains(part), "missing `{part}` in\n{out}");
        }
        assert!(!out.contains("clone (& self)"), "{out}");
    }

    #[test]
    fn what_a_second_run_cannot_get_is_an_error() {
        for (item, needle) in [
            (
                quote!(
                    async fn f(&mut self) -> Result<(), E> {
                        self.x += 1;
                        Ok(())
                    }
                ),
                "`self` is `&mut self`",
            ),
            (
                quote!(
                    async fn f(self) -> Result<(), E> {
                        drop(self);
                        Ok(())
                    }
                ),
                "`self` is `self` by value",
            ),
            (
                quote!(
                    async fn f(buf: &mut Vec<u8>) -> Result<(), E> {
                        buf.push(1);
                        Ok(())
                    }
                ),
                "`buf` is a `&mut` reference",
            ),
        ] {
            let out = expand_str(quote!(election = "e"), item);
            assert!(out.contains("compile_error"), "{out}");
            assert!(out.contains(needle), "`{needle}` in\n{out}");
        }
        // Not used by the body (here only in the template): fine.
        let out = expand_str(
            quote!(election = "e:{id}"),
            quote!(
                async fn f(&mut self, id: &mut u8) -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn the_fn_must_be_async_and_return_a_result() {
        let out = expand_str(
            quote!(election = "e"),
            quote!(
                fn f() -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(
            out.contains("#[leader_only] works on `async fn` only"),
            "{out}"
        );
        for item in [
            quote!(
                async fn f() {}
            ),
            quote!(
                async fn f() -> u8 {
                    1
                }
            ),
        ] {
            let out = expand_str(quote!(election = "e"), item);
            assert!(out.contains("return `Result<T, E>`"), "{out}");
        }
        let out = expand_str(
            quote!(election = "{nope}"),
            quote!(
                async fn f(a: u8) -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(
            out.contains(
                "unknown name `nope` in the election template: the arguments of `f` are `a`"
            ),
            "{out}"
        );
        let out = expand_str(
            quote!(election = "e"),
            quote!(
                struct S;
            ),
        );
        assert!(
            out.contains("#[leader_only] goes on an `async fn`"),
            "{out}"
        );
    }
}
