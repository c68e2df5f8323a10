//! What the annotated fn's signature allows: how a lock failure gets back to
//! the caller (from the return type), and which names a key may use.

use syn::spanned::Spanned;
use syn::{FnArg, GenericArgument, Ident, Pat, PathArguments, ReturnType, Signature, Type};

/// How the generated code reports that the lock was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `Result<T, E>`: lock failures come back as `Err(E::from(err))`.
    Fail,
    /// `Result<T, E>` with `cancel_on_lost`: as [`Mode::Fail`], and a lock
    /// lost while the body runs drops the body and returns `Err`.
    CancelOnLost,
    /// `()` / `Option<T>` with `skip_if_locked`: the body is skipped and the
    /// fn returns `()` / `None`.
    Skip,
    /// `Result<(), E>` / `Result<Option<T>, E>` with `skip_if_locked`: a
    /// busy lock returns `Ok(())` / `Ok(None)`, other failures `Err`.
    SkipResult,
}

/// The return type's shape, as far as the syntax tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Unit,
    Option,
    /// A type whose last path segment is `Result` or ends in it (aliases
    /// such as `io::Result<T>` or `ShopResult<T>`); the shape of its first
    /// type argument when it has one.
    Result(Option<Inner>),
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inner {
    Skippable,
    Other,
}

const FAIL_HELP: &str = "return `Result<T, E>` where `E: From<lock_core::Error>` \
    (lock failures then come back as `Err`)";
const SKIP_TYPES: &str = "`()`, `Option<T>`, `Result<(), E>` or `Result<Option<T>, E>`";

/// The error for a fn that is not `async`, for the attribute `attribute`
/// (`distributed_lock`, `leader_only`).
pub(crate) fn check_async(sig: &Signature, attribute: &str) -> syn::Result<()> {
    if sig.asyncness.is_none() {
        return Err(syn::Error::new_spanned(
            sig.fn_token,
            format!(
                "#[{attribute}] works on `async fn` only: make `{}` async",
                sig.ident
            ),
        ));
    }
    Ok(())
}

/// The flag options that decide the [`Mode`] (the arguments never hold both).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Flags<'a> {
    pub(crate) skip_if_locked: Option<&'a Ident>,
    pub(crate) cancel_on_lost: Option<&'a Ident>,
}

/// Checks that the fn is `async` and picks the [`Mode`] its return type and
/// `skip_if_locked` / `cancel_on_lost` call for; a combination that cannot
/// work is an error that says what would.
pub(crate) fn mode(sig: &Signature, flags: Flags<'_>) -> syn::Result<Mode> {
    check_async(sig, "distributed_lock")?;
    let (shape, span) = match &sig.output {
        ReturnType::Default => (Shape::Unit, sig.ident.span()),
        ReturnType::Type(_, ty) => (shape_of(ty), ty.span()),
    };
    let name = &sig.ident;
    if flags.cancel_on_lost.is_some() {
        return match shape {
            Shape::Result(_) => Ok(Mode::CancelOnLost),
            _ => {
                let what = match shape {
                    Shape::Unit => format!("`{name}` returns `()`"),
                    Shape::Option => format!("`{name}` returns `Option<T>`"),
                    _ => format!("the return type of `{name}` is not a `Result`"),
                };
                Err(syn::Error::new(
                    span,
                    format!(
                        "`cancel_on_lost` reports a lost lock as `Err`, but {what}: {FAIL_HELP}, \
                         or remove `cancel_on_lost`"
                    ),
                ))
            }
        };
    }
    match (shape, flags.skip_if_locked.is_some()) {
        (Shape::Result(_), false) => Ok(Mode::Fail),
        (Shape::Result(Some(Inner::Skippable)), true) => Ok(Mode::SkipResult),
        (Shape::Unit | Shape::Option, true) => Ok(Mode::Skip),
        (Shape::Unit | Shape::Option, false) => {
            let what = if shape == Shape::Unit {
                "`()`"
            } else {
                "`Option<T>`"
            };
            Err(syn::Error::new(
                span,
                format!(
                    "`{name}` returns {what}, which cannot carry a lock failure: {FAIL_HELP}, \
                     or add `skip_if_locked` to skip the body when the lock is held elsewhere"
                ),
            ))
        }
        (Shape::Other, false) => Err(syn::Error::new(
            span,
            format!(
                "the return type of `{name}` cannot carry a lock failure: {FAIL_HELP}, \
                 or return `()` or `Option<T>` and add `skip_if_locked` (an alias of `Result` \
                 is recognised when its name ends in `Result`)"
            ),
        )),
        (Shape::Result(_) | Shape::Other, true) => {
            let drop_skip = if matches!(shape, Shape::Result(_)) {
                "; or remove `skip_if_locked` to wait for the lock and get lock failures as `Err`"
            } else {
                ""
            };
            Err(syn::Error::new(
                span,
                format!(
                    "`skip_if_locked` needs a return type with a value for a skipped call: \
                     {SKIP_TYPES}{drop_skip}"
                ),
            ))
        }
    }
}

/// Whether the fn returns a `Result` (by the last path segment of its
/// return type, as for `#[distributed_lock]`).
pub(crate) fn returns_result(sig: &Signature) -> bool {
    match &sig.output {
        ReturnType::Default => false,
        ReturnType::Type(_, ty) => matches!(shape_of(ty), Shape::Result(_)),
    }
}

/// How an argument's binding is taken: `#[leader_only]` gives each run of
/// the body a clone of the bindings it uses.
#[derive(Debug, Clone)]
pub(crate) struct Binding {
    /// The name (`self` for the receiver).
    pub(crate) ident: Ident,
    /// `mut name`: the clone is bound `mut` too.
    pub(crate) mutable: bool,
    /// What cannot be given to a second run: a receiver taken by value or
    /// by `&mut`, an argument typed `&mut T`. `None` for what can be
    /// cloned (a binding of a destructured argument counts as clonable:
    /// its type is not spelled out).
    pub(crate) not_clonable: Option<&'static str>,
}

/// Every binding of the fn's arguments, with `self` first for methods.
pub(crate) fn bindings_of(sig: &Signature) -> Vec<Binding> {
    let mut out = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(receiver) => {
                let not_clonable = match &*receiver.ty {
                    Type::Reference(r) if r.mutability.is_none() => None,
                    Type::Reference(_) => Some("`&mut self`"),
                    _ => Some("`self` by value"),
                };
                out.push(Binding {
                    ident: Ident::new("self", receiver.self_token.span),
                    mutable: false,
                    not_clonable,
                });
            }
            FnArg::Typed(typed) => {
                let mut names = Vec::new();
                binding_idents(&typed.pat, &mut names);
                let mut_ref = matches!(&*typed.ty, Type::Reference(r) if r.mutability.is_some());
                for (ident, mutable) in names {
                    out.push(Binding {
                        ident,
                        mutable,
                        not_clonable: mut_ref.then_some("a `&mut` reference"),
                    });
                }
            }
        }
    }
    out
}

fn binding_idents(pat: &Pat, out: &mut Vec<(Ident, bool)>) {
    match pat {
        Pat::Ident(p) => {
            out.push((p.ident.clone(), p.mutability.is_some()));
            if let Some((_, sub)) = &p.subpat {
                binding_idents(sub, out);
            }
        }
        Pat::Tuple(p) => p.elems.iter().for_each(|p| binding_idents(p, out)),
        Pat::TupleStruct(p) => p.elems.iter().for_each(|p| binding_idents(p, out)),
        Pat::Struct(p) => p.fields.iter().for_each(|f| binding_idents(&f.pat, out)),
        Pat::Slice(p) => p.elems.iter().for_each(|p| binding_idents(p, out)),
        Pat::Reference(p) => binding_idents(&p.pat, out),
        Pat::Paren(p) => binding_idents(&p.pat, out),
        Pat::Type(p) => binding_idents(&p.pat, out),
        _ => {}
    }
}

fn shape_of(ty: &Type) -> Shape {
    match ty {
        Type::Paren(inner) => shape_of(&inner.elem),
        Type::Group(inner) => shape_of(&inner.elem),
        Type::Tuple(tuple) if tuple.elems.is_empty() => Shape::Unit,
        Type::Path(path) if path.qself.is_none() => {
            let Some(last) = path.path.segments.last() else {
                return Shape::Other;
            };
            if last.ident == "Option" {
                Shape::Option
            } else if last.ident.to_string().ends_with("Result") {
                Shape::Result(first_type_arg(&last.arguments).map(|t| match shape_of(t) {
                    Shape::Unit | Shape::Option => Inner::Skippable,
                    _ => Inner::Other,
                }))
            } else {
                Shape::Other
            }
        }
        _ => Shape::Other,
    }
}

fn first_type_arg(args: &PathArguments) -> Option<&Type> {
    match args {
        PathArguments::AngleBracketed(args) => args.args.iter().find_map(|a| match a {
            GenericArgument::Type(t) => Some(t),
            _ => None,
        }),
        _ => None,
    }
}

/// The names a key template may start with: every binding of the fn's
/// arguments, and `self` for methods.
pub(crate) fn argument_names(sig: &Signature) -> Vec<String> {
    let mut names = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(_) => names.push("self".to_owned()),
            FnArg::Typed(typed) => bindings(&typed.pat, &mut names),
        }
    }
    names
}

fn bindings(pat: &Pat, out: &mut Vec<String>) {
    match pat {
        Pat::Ident(p) => {
            out.push(p.ident.to_string());
            if let Some((_, sub)) = &p.subpat {
                bindings(sub, out);
            }
        }
        Pat::Tuple(p) => p.elems.iter().for_each(|p| bindings(p, out)),
        Pat::TupleStruct(p) => p.elems.iter().for_each(|p| bindings(p, out)),
        Pat::Struct(p) => p.fields.iter().for_each(|f| bindings(&f.pat, out)),
        Pat::Slice(p) => p.elems.iter().for_each(|p| bindings(p, out)),
        Pat::Reference(p) => bindings(&p.pat, out),
        Pat::Paren(p) => bindings(&p.pat, out),
        Pat::Type(p) => bindings(&p.pat, out),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proc_macro2::Span;

    fn sig(tokens: proc_macro2::TokenStream) -> Signature {
        syn::parse2(tokens).unwrap_or_else(|e| panic!("{e}"))
    }

    fn skip() -> Ident {
        Ident::new("skip_if_locked", Span::call_site())
    }

    fn cancel() -> Ident {
        Ident::new("cancel_on_lost", Span::call_site())
    }

    fn skipping(skip: &Ident) -> Flags<'_> {
        Flags {
            skip_if_locked: Some(skip),
            cancel_on_lost: None,
        }
    }

    #[test]
    fn result_returns_fail_with_err() {
        for s in [
            quote::quote!(async fn f() -> Result<u32, E>),
            quote::quote!(async fn f() -> std::io::Result<()>),
            quote::quote!(async fn f() -> anyhow::Result<String>),
            quote::quote!(async fn f() -> crate::Result),
            quote::quote!(async fn f() -> ShopResult<u8>),
        ] {
            assert_eq!(mode(&sig(s), Flags::default()).ok(), Some(Mode::Fail));
        }
    }

    #[test]
    fn skip_if_locked_needs_a_value_for_skipped() {
        let skip = skip();
        for (s, expected) in [
            (quote::quote!(async fn f()), Some(Mode::Skip)),
            (quote::quote!(async fn f() -> ()), Some(Mode::Skip)),
            (quote::quote!(async fn f() -> Option<u8>), Some(Mode::Skip)),
            (
                quote::quote!(async fn f() -> Result<(), E>),
                Some(Mode::SkipResult),
            ),
            (
                quote::quote!(async fn f() -> Result<Option<u8>, E>),
                Some(Mode::SkipResult),
            ),
            (quote::quote!(async fn f() -> Result<u8, E>), None),
            (quote::quote!(async fn f() -> MyResult), None),
            (
                quote::quote!(async fn f() -> MyResult<Option<u8>>),
                Some(Mode::SkipResult),
            ),
            (quote::quote!(async fn f() -> u8), None),
        ] {
            assert_eq!(mode(&sig(s.clone()), skipping(&skip)).ok(), expected, "{s}");
        }
    }

    #[test]
    fn cancel_on_lost_needs_a_result() {
        let cancel = cancel();
        let flags = Flags {
            skip_if_locked: None,
            cancel_on_lost: Some(&cancel),
        };
        for s in [
            quote::quote!(async fn f() -> Result<u32, E>),
            quote::quote!(async fn f() -> Result<(), E>),
            quote::quote!(async fn f() -> anyhow::Result<Option<u8>>),
        ] {
            assert_eq!(mode(&sig(s), flags).ok(), Some(Mode::CancelOnLost));
        }
        for (s, what) in [
            (quote::quote!(async fn f()), "`f` returns `()`"),
            (
                quote::quote!(async fn f() -> Option<u8>),
                "`f` returns `Option<T>`",
            ),
            (
                quote::quote!(async fn f() -> u8),
                "the return type of `f` is not a `Result`",
            ),
        ] {
            let err = match mode(&sig(s), flags) {
                Ok(m) => panic!("expected an error, got {m:?}"),
                Err(e) => e.to_string(),
            };
            assert!(
                err.contains("`cancel_on_lost` reports a lost lock as `Err`"),
                "{err}"
            );
            assert!(err.contains(what), "{err}");
        }
    }

    #[test]
    fn other_combinations_say_what_would_work() {
        let err = |s| match mode(&sig(s), Flags::default()) {
            Ok(m) => panic!("expected an error, got {m:?}"),
            Err(e) => e.to_string(),
        };
        assert!(err(quote::quote!(fn f() -> Result<(), E>)).contains("make `f` async"));
        assert!(err(quote::quote!(async fn f())).contains("add `skip_if_locked`"));
        assert!(err(quote::quote!(async fn f() -> u8)).contains("return `Result<T, E>`"));
    }

    #[test]
    fn argument_names_include_self_and_pattern_bindings() {
        let names = argument_names(&sig(quote::quote!(
            async fn f(&self, a: u8, (b, mut c): (u8, u8), Wrapper { d, .. }: Wrapper)
        )));
        assert_eq!(names, ["self", "a", "b", "c", "d"]);
    }
}
