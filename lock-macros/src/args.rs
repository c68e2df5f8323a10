//! The attribute's arguments: `key = "..."` (or `key = ["...", "..."]`, a
//! multi-lock), `mode = "read"`, `permits = 4`,
//! `wait = "5s"`, `lease = "30s"`, `client = <expr>`, `skip_if_locked`,
//! `cancel_on_lost`, `crate = "path"`.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Path, Token};

use crate::template::KeyTemplate;

/// Every option the attribute takes, in the order the docs list them.
const OPTIONS: &str = "`key`, `mode`, `permits`, `wait`, `lease`, `client`, `skip_if_locked`, \
     `cancel_on_lost`, `crate`";

/// The values `mode` takes.
const MODES: &str = "\"read\", \"write\", \"fair\" or \"exclusive\" (the default)";

/// The most permits `permits = N` may name (lock-core's bound on one
/// acquisition).
const MAX_PERMITS: u64 = 10_000;

/// The longest lease lock-core accepts (365 days), in milliseconds.
const MAX_LEASE_MS: u64 = 365 * 24 * 60 * 60 * 1000;

/// A duration written as a string literal, checked at compile time.
#[derive(Debug, Clone)]
pub(crate) struct DurationArg {
    pub(crate) millis: u64,
    pub(crate) lit: LitStr,
}

/// Which lock the attribute takes: lock-core's exclusive lock (the
/// default), or one side of its read-write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockKind {
    /// `LockClient::lock`: one holder at a time.
    Exclusive,
    /// `LockClient::rw_lock(..).read()`: shared with other readers.
    Read,
    /// `LockClient::rw_lock(..).write()`: alone.
    Write,
    /// `LockClient::fair_lock`: alone, in arrival order.
    Fair,
}

/// `permits = N`: the fn holds one permit of the expirable semaphore `key`
/// of `count` permits instead of a lock.
#[derive(Debug, Clone)]
pub(crate) struct PermitsArg {
    /// 1 to [`MAX_PERMITS`].
    pub(crate) count: u64,
    /// The option's name, for errors about combining it.
    pub(crate) name: Ident,
}

/// The parsed arguments of one `#[distributed_lock(...)]`.
#[derive(Debug)]
pub(crate) struct Args {
    /// The key; with `key = [..]`, the first of the keys.
    pub(crate) key: KeyTemplate,
    /// `key = ["a:{x}", "b:{y}", ..]`: the keys after the first (a
    /// multi-lock of every key); empty for `key = "..."` and for a list of
    /// one key (a lock like `key = "..."`).
    pub(crate) more_keys: Vec<KeyTemplate>,
    /// `mode = "..."`; `Exclusive` when not given.
    pub(crate) kind: LockKind,
    /// `permits = N`; never together with `mode`.
    pub(crate) permits: Option<PermitsArg>,
    pub(crate) wait: Option<DurationArg>,
    pub(crate) lease: Option<DurationArg>,
    pub(crate) client: Option<Expr>,
    /// The `skip_if_locked` token, when given.
    pub(crate) skip_if_locked: Option<Ident>,
    /// The `cancel_on_lost` token, when given.
    pub(crate) cancel_on_lost: Option<Ident>,
    /// The path to lock-core (`::lock_core` unless `crate = "..."`).
    pub(crate) krate: Path,
}

/// The options as they are read, before `key` is known to be there.
#[derive(Default)]
struct Partial {
    key: Option<Vec<KeyTemplate>>,
    kind: Option<LockKind>,
    /// The `mode` token, when given (to point at it when combined with `permits`).
    mode_name: Option<Ident>,
    permits: Option<PermitsArg>,
    wait: Option<DurationArg>,
    lease: Option<DurationArg>,
    client: Option<Expr>,
    skip_if_locked: Option<Ident>,
    cancel_on_lost: Option<Ident>,
    krate: Option<Path>,
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut partial = Partial::default();
        while !input.is_empty() {
            // `crate` is a keyword: accept any identifier, keywords included.
            let name = input.call(Ident::parse_any)?;
            match name.to_string().as_str() {
                "key" => {
                    let keys = key_list(input)?;
                    set_once(&mut partial.key, keys, &name)?;
                }
                "mode" => {
                    let kind = lock_kind(&value::<Expr>(input)?)?;
                    set_once(&mut partial.kind, kind, &name)?;
                    partial.mode_name = Some(name.clone());
                }
                "permits" => {
                    let count = permit_count(&value::<Expr>(input)?)?;
                    let arg = PermitsArg {
                        count,
                        name: name.clone(),
                    };
                    set_once(&mut partial.permits, arg, &name)?;
                }
                "wait" => {
                    let d = duration(&value::<LitStr>(input)?, "wait")?;
                    set_once(&mut partial.wait, d, &name)?;
                }
                "lease" => {
                    let d = duration(&value::<LitStr>(input)?, "lease")?;
                    if d.millis > MAX_LEASE_MS {
                        return Err(syn::Error::new_spanned(
                            &d.lit,
                            "`lease` must be at most 365 days",
                        ));
                    }
                    set_once(&mut partial.lease, d, &name)?;
                }
                "client" => {
                    let expr = value::<Expr>(input)?;
                    set_once(&mut partial.client, expr, &name)?;
                }
                "skip_if_locked" => {
                    flag(input, &name)?;
                    set_once(&mut partial.skip_if_locked, name.clone(), &name)?;
                }
                "cancel_on_lost" => {
                    flag(input, &name)?;
                    set_once(&mut partial.cancel_on_lost, name.clone(), &name)?;
                }
                "crate" => {
                    let path = crate_path(&value::<LitStr>(input)?)?;
                    set_once(&mut partial.krate, path, &name)?;
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
        let Some(mut keys) = partial.key else {
            return Err(syn::Error::new(
                Span::call_site(),
                "missing `key`: write #[distributed_lock(key = \"orders:{order_id}\")]",
            ));
        };
        let key = keys.remove(0);
        let more_keys = keys;
        if !more_keys.is_empty() {
            let other = partial
                .permits
                .as_ref()
                .map(|p| &p.name)
                .or(partial.mode_name.as_ref());
            if let Some(other) = other {
                return Err(syn::Error::new_spanned(
                    other,
                    format!(
                        "`{other}` cannot be combined with several keys: `key = [..]` takes an \
                         exclusive multi-lock of every key; remove `{other}` or use one key"
                    ),
                ));
            }
        }
        if let (Some(cancel), Some(_)) = (&partial.cancel_on_lost, &partial.skip_if_locked) {
            return Err(syn::Error::new_spanned(
                cancel,
                "`cancel_on_lost` cannot be combined with `skip_if_locked`: remove one of them \
                 (`cancel_on_lost` waits for the lock and reports a lost lock as `Err`)",
            ));
        }
        if let (Some(permits), Some(_)) = (&partial.permits, &partial.mode_name) {
            return Err(syn::Error::new_spanned(
                &permits.name,
                "`permits` cannot be combined with `mode`: `permits = N` takes a permit of the \
                 semaphore `key`, `mode` a side of the read-write lock `key`; remove one of them",
            ));
        }
        Ok(Args {
            key,
            more_keys,
            kind: partial.kind.unwrap_or(LockKind::Exclusive),
            permits: partial.permits,
            wait: partial.wait,
            lease: partial.lease,
            client: partial.client,
            skip_if_locked: partial.skip_if_locked,
            cancel_on_lost: partial.cancel_on_lost,
            krate: partial
                .krate
                .unwrap_or_else(|| syn::parse_quote!(::lock_core)),
        })
    }
}

/// Checks that a flag option (`skip_if_locked`, `cancel_on_lost`) has no value.
fn flag(input: ParseStream<'_>, name: &Ident) -> syn::Result<()> {
    if input.peek(Token![=]) {
        return Err(syn::Error::new_spanned(
            name,
            format!("`{name}` takes no value: write `{name}` alone"),
        ));
    }
    Ok(())
}

/// Parses the value of `crate`: a path to lock-core.
pub(crate) fn crate_path(lit: &LitStr) -> syn::Result<Path> {
    lit.parse_with(Path::parse_mod_style).map_err(|_| {
        syn::Error::new_spanned(
            lit,
            "`crate` must be a path to lock-core, like \"::my_app::lock_core\"",
        )
    })
}

/// Parses `= <value>` after an option's name.
pub(crate) fn value<T: Parse>(input: ParseStream<'_>) -> syn::Result<T> {
    input.parse::<Token![=]>()?;
    input.parse()
}

/// The value of `key`: `= "template"`, or `= ["template", ...]` (at least
/// one; each a template).
fn key_list(input: ParseStream<'_>) -> syn::Result<Vec<KeyTemplate>> {
    input.parse::<Token![=]>()?;
    if !input.peek(syn::token::Bracket) {
        let lit = input.parse::<LitStr>()?;
        return Ok(vec![KeyTemplate::parse(&lit)?]);
    }
    let content;
    let brackets = syn::bracketed!(content in input);
    let lits = content.parse_terminated(<LitStr as Parse>::parse, Token![,])?;
    if lits.is_empty() {
        return Err(syn::Error::new(
            brackets.span.join(),
            "`key = []` names no lock: give at least one key template",
        ));
    }
    lits.iter().map(KeyTemplate::parse).collect()
}

/// Stores an option's value; a second occurrence is an error on its name.
pub(crate) fn set_once<T>(slot: &mut Option<T>, value: T, name: &Ident) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new_spanned(
            name,
            format!("duplicate option `{name}`"),
        ));
    }
    *slot = Some(value);
    Ok(())
}

/// Parses the value of `mode`: a string literal naming the lock's kind.
/// Anything else is an error on the value.
fn lock_kind(value: &Expr) -> syn::Result<LockKind> {
    let lit = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => lit,
        _ => {
            return Err(syn::Error::new_spanned(
                value,
                format!("`mode` takes a string: {MODES}, like mode = \"read\""),
            ))
        }
    };
    match lit.value().as_str() {
        "exclusive" => Ok(LockKind::Exclusive),
        "read" => Ok(LockKind::Read),
        "write" => Ok(LockKind::Write),
        "fair" => Ok(LockKind::Fair),
        other => Err(syn::Error::new_spanned(
            lit,
            format!("unknown mode {other:?}: write {MODES}"),
        )),
    }
}

/// Parses the value of `permits`: a whole number from 1 to
/// [`MAX_PERMITS`], written as an integer literal. Anything else is an
/// error on the value.
fn permit_count(value: &Expr) -> syn::Result<u64> {
    let help = format!("`permits` takes a whole number from 1 to {MAX_PERMITS}, like permits = 4");
    let lit = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => lit,
        Expr::Unary(syn::ExprUnary {
            op: syn::UnOp::Neg(_),
            ..
        }) => {
            return Err(syn::Error::new_spanned(
                value,
                format!("`permits` must not be negative: {help}"),
            ))
        }
        _ => return Err(syn::Error::new_spanned(value, help)),
    };
    let problem = match lit.base10_parse::<u64>() {
        Ok(count) if (1..=MAX_PERMITS).contains(&count) => return Ok(count),
        Ok(0) => "must be at least 1 (a semaphore of 0 permits lets no call in)".to_owned(),
        _ => format!("must be at most {MAX_PERMITS}"),
    };
    Err(syn::Error::new_spanned(
        lit,
        format!("`permits` {problem}: {help}"),
    ))
}

/// Parses `"250ms"`, `"5s"`, `"2m"` or `"1h"`; zero is rejected.
fn duration(lit: &LitStr, option: &str) -> syn::Result<DurationArg> {
    let text = lit.value();
    let invalid = || {
        syn::Error::new_spanned(
            lit,
            format!(
                "invalid duration {text:?} for `{option}`: write a whole number and a unit \
                 (ms, s, m or h), like \"250ms\", \"5s\", \"2m\" or \"1h\""
            ),
        )
    };
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(invalid)?;
    let (digits, unit) = text.split_at(digits_end);
    let number: u64 = digits.parse().map_err(|_| invalid())?;
    let factor: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(invalid()),
    };
    let millis = number.checked_mul(factor).ok_or_else(invalid)?;
    if millis == 0 {
        let hint = if option == "wait" {
            " (with `skip_if_locked`, leave `wait` out to try once)"
        } else {
            ""
        };
        return Err(syn::Error::new_spanned(
            lit,
            format!("`{option}` must be greater than zero{hint}"),
        ));
    }
    Ok(DurationArg {
        millis,
        lit: lit.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(tokens: proc_macro2::TokenStream) -> syn::Result<Args> {
        syn::parse2(tokens)
    }

    fn err(tokens: proc_macro2::TokenStream) -> String {
        match parse(tokens) {
            Ok(args) => panic!("expected an error, got {args:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn parses_every_option() {
        let args = parse(quote::quote!(
            key = "a:{id}",
            wait = "250ms",
            lease = "2m",
            client = self.locks.clone(),
            skip_if_locked,
            crate = "::facade::locks",
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        let cancel =
            parse(quote::quote!(key = "a", cancel_on_lost)).unwrap_or_else(|e| panic!("{e}"));
        assert!(cancel.cancel_on_lost.is_some());
        assert!(cancel.skip_if_locked.is_none());
        assert_eq!(args.kind, LockKind::Exclusive);
        assert_eq!(args.wait.map(|d| d.millis), Some(250));
        assert_eq!(args.lease.map(|d| d.millis), Some(120_000));
        assert!(args.client.is_some());
        assert!(args.skip_if_locked.is_some());
        let krate = &args.krate;
        assert_eq!(quote::quote!(#krate).to_string(), ":: facade :: locks");
    }

    #[test]
    fn mode_names_the_lock_kind() {
        for (tokens, kind) in [
            (quote::quote!(key = "a"), LockKind::Exclusive),
            (
                quote::quote!(key = "a", mode = "exclusive"),
                LockKind::Exclusive,
            ),
            (quote::quote!(mode = "read", key = "a"), LockKind::Read),
            (quote::quote!(key = "a", mode = "fair"), LockKind::Fair),
            (
                quote::quote!(key = "a", mode = "write", skip_if_locked),
                LockKind::Write,
            ),
        ] {
            let args = parse(tokens).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(args.kind, kind);
        }
        assert!(err(quote::quote!(key = "a", mode = "shared")).contains("unknown mode \"shared\""));
        assert!(err(quote::quote!(key = "a", mode = "Read")).contains("unknown mode"));
        assert!(err(quote::quote!(key = "a", mode = read)).contains("`mode` takes a string"));
        assert!(err(quote::quote!(key = "a", mode = 1)).contains("`mode` takes a string"));
        assert!(err(quote::quote!(key = "a", mode)).contains("expected `=`"));
        assert!(err(quote::quote!(key = "a", mode = "read", mode = "write"))
            .contains("duplicate option `mode`"));
    }

    #[test]
    fn permits_name_a_semaphore_of_1_to_10_000() {
        for (tokens, count) in [
            (quote::quote!(key = "a", permits = 1), 1),
            (quote::quote!(permits = 4, key = "a", wait = "1s"), 4),
            (quote::quote!(key = "a", permits = 10_000), 10_000),
            (quote::quote!(key = "a", permits = 3u32, skip_if_locked), 3),
        ] {
            let args = parse(tokens).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(args.permits.map(|p| p.count), Some(count));
            assert_eq!(args.kind, LockKind::Exclusive);
        }
        assert!(parse(quote::quote!(key = "a"))
            .map(|a| a.permits.is_none())
            .unwrap_or(false));
        assert!(err(quote::quote!(key = "a", permits = 0)).contains("at least 1"));
        assert!(err(quote::quote!(key = "a", permits = -2)).contains("must not be negative"));
        assert!(err(quote::quote!(key = "a", permits = 10_001)).contains("at most 10000"));
        assert!(
            err(quote::quote!(key = "a", permits = 99999999999999999999999)).contains("at most")
        );
        for bad in [
            quote::quote!(key = "a", permits = "4"),
            quote::quote!(key = "a", permits = 2.5),
            quote::quote!(key = "a", permits = n),
        ] {
            assert!(err(bad).contains("takes a whole number from 1 to 10000"));
        }
        assert!(err(quote::quote!(key = "a", permits = 2, permits = 3))
            .contains("duplicate option `permits`"));
        for combined in [
            quote::quote!(key = "a", permits = 2, mode = "read"),
            quote::quote!(key = "a", mode = "exclusive", permits = 2),
        ] {
            assert!(err(combined).contains("`permits` cannot be combined with `mode`"));
        }
    }

    #[test]
    fn durations_in_every_unit() {
        for (text, millis) in [
            ("7ms", 7),
            ("5s", 5_000),
            ("2m", 120_000),
            ("1h", 3_600_000),
        ] {
            let lit = LitStr::new(text, Span::call_site());
            assert_eq!(duration(&lit, "wait").map(|d| d.millis).ok(), Some(millis));
        }
        for bad in [
            "",
            "5",
            "s",
            "5 s",
            "5sec",
            "-1s",
            "1.5s",
            "99999999999999999999h",
        ] {
            let lit = LitStr::new(bad, Span::call_site());
            assert!(duration(&lit, "wait").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn rejects_misuse_with_a_clear_message() {
        assert!(err(quote::quote!()).contains("missing `key`"));
        assert!(err(quote::quote!(key = "a", key = "b")).contains("duplicate option `key`"));
        assert!(err(quote::quote!(key = "a", timeout = "1s")).contains("valid options: `key`"));
        assert!(err(quote::quote!(key = "a", wait = "0s")).contains("greater than zero"));
        assert!(err(quote::quote!(key = "a", lease = "9000h")).contains("at most 365 days"));
        assert!(err(quote::quote!(key = "a", skip_if_locked = true)).contains("takes no value"));
        assert!(err(quote::quote!(key = "a", crate = "not a path")).contains("path to lock-core"));
        assert!(err(quote::quote!(key = "a", cancel_on_lost = true)).contains("takes no value"));
        assert!(
            err(quote::quote!(key = "a", cancel_on_lost, cancel_on_lost))
                .contains("duplicate option `cancel_on_lost`")
        );
        assert!(
            err(quote::quote!(key = "a", skip_if_locked, cancel_on_lost))
                .contains("cannot be combined with `skip_if_locked`")
        );
        assert!(err(quote::quote!(key = "a", timeout = "1s")).contains("`cancel_on_lost`"));
    }

    #[test]
    fn a_list_of_keys_is_a_multi_lock() {
        let args = parse(quote::quote!(
            key = ["account:{from}", "account:{to}"],
            wait = "2s"
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(args.key.lit.value(), "account:{from}");
        assert_eq!(args.more_keys.len(), 1);
        assert_eq!(args.more_keys[0].lit.value(), "account:{to}");
        // a trailing comma; a list of one is a lock like `key = "..."`
        let args = parse(quote::quote!(key = ["a", "b",])).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(args.more_keys.len(), 1);
        let args = parse(quote::quote!(key = ["a"])).unwrap_or_else(|e| panic!("{e}"));
        assert!(args.more_keys.is_empty());
        assert!(err(quote::quote!(key = [])).contains("names no lock"));
        assert!(err(quote::quote!(key = ["a", 1])).contains("expected string literal"));
        assert!(err(quote::quote!(key = ["a", "{"])).contains("template"));
        assert!(err(quote::quote!(key = ["a", "b"], mode = "read"))
            .contains("`mode` cannot be combined with several keys"));
        assert!(err(quote::quote!(key = ["a", "b"], permits = 2))
            .contains("`permits` cannot be combined with several keys"));
        assert!(err(quote::quote!(key = ["a", "b"], key = "c")).contains("duplicate option `key`"));
    }
}
