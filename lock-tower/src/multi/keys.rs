//! Deriving several lock keys from a request.

use crate::key::MakeLockKey;

/// Maps a request to the names of every lock it must hold at once; an
/// empty list means "no lock" (the request then passes straight through,
/// with no Redis call). The key function of a
/// [`MultiLockLayer`](crate::MultiLockLayer).
///
/// The order does not matter and duplicates count once: the layer takes
/// the keys through [`LockClient::multi_lock`](lock_core::LockClient::multi_lock),
/// which sorts them, so two requests over the same keys in any order
/// never deadlock.
///
/// Implemented by:
/// - closures `Fn(&Req) -> L` whose `L` is a list of keys
///   ([`IntoLockKeys`]): `Vec<T>`, `[T; N]`, or an `Option` of one of
///   them (`None` = no lock), with `T: Into<String>` (`String`, `&'static str`);
/// - tuples of one to four single-key functions
///   ([`MakeLockKey`]: closures `Fn(&Req) -> Option<T>` or the ready-made
///   extractors such as [`PathSegment`](crate::PathSegment) and
///   [`HeaderKey`](crate::HeaderKey)): one key from each that gives one
///   (those that give `None` add nothing);
/// - types of your own.
///
/// ```
/// use lock_tower::{MakeLockKey, MakeLockKeys};
///
/// struct Transfer { from: u64, to: u64 }
///
/// // a closure returning a list ...
/// let accounts = |t: &Transfer| vec![format!("account:{}", t.from), format!("account:{}", t.to)];
/// let t = Transfer { from: 17, to: 4 };
/// assert_eq!(accounts.make_lock_keys(&t), ["account:17", "account:4"]);
///
/// // ... an array, or an Option of one (None: no lock) ...
/// let both = |t: &Transfer| (t.from != t.to).then(|| [format!("a:{}", t.from), format!("a:{}", t.to)]);
/// assert!(both.make_lock_keys(&Transfer { from: 1, to: 1 }).is_empty());
///
/// // ... a tuple of single-key functions ...
/// let pair = (
///     |t: &Transfer| Some(format!("account:{}", t.from)),
///     |t: &Transfer| Some(format!("account:{}", t.to)),
/// );
/// assert_eq!(pair.make_lock_keys(&t), ["account:17", "account:4"]);
///
/// // ... or a type of your own.
/// struct Accounts;
/// impl MakeLockKeys<Transfer> for Accounts {
///     fn make_lock_keys(&self, t: &Transfer) -> Vec<String> {
///         [t.from, t.to].iter().map(|a| format!("account:{a}")).collect()
///     }
/// }
/// assert_eq!(Accounts.make_lock_keys(&t).len(), 2);
/// ```
pub trait MakeLockKeys<Req> {
    /// The lock names for `req`; empty for "no lock".
    ///
    /// ```
    /// use lock_tower::MakeLockKeys;
    /// let keys = |n: &u32| if *n > 10 { vec![format!("big:{n}"), "big".to_string()] } else { vec![] };
    /// assert!(keys.make_lock_keys(&3).is_empty());
    /// assert_eq!(keys.make_lock_keys(&30), ["big:30", "big"]);
    /// ```
    fn make_lock_keys(&self, req: &Req) -> Vec<String>;
}

/// What a closure given to a [`MultiLockLayer`](crate::MultiLockLayer)
/// may return: a list of lock names. Implemented for `Vec<T>` and
/// `[T; N]` with `T: Into<String>`, and for `Option<L>` of those (`None`
/// is an empty list: no lock).
///
/// ```
/// use lock_tower::IntoLockKeys;
/// assert_eq!(vec!["a", "b"].into_lock_keys(), ["a", "b"]);
/// assert_eq!(["a".to_string()].into_lock_keys(), ["a"]);
/// assert!(None::<Vec<String>>.into_lock_keys().is_empty());
/// ```
pub trait IntoLockKeys {
    /// The names, as owned strings.
    ///
    /// ```
    /// use lock_tower::IntoLockKeys;
    /// assert_eq!(Some(["x"]).into_lock_keys(), ["x"]);
    /// ```
    fn into_lock_keys(self) -> Vec<String>;
}

impl<T: Into<String>> IntoLockKeys for Vec<T> {
    fn into_lock_keys(self) -> Vec<String> {
        self.into_iter().map(Into::into).collect()
    }
}

impl<T: Into<String>, const N: usize> IntoLockKeys for [T; N] {
    fn into_lock_keys(self) -> Vec<String> {
        self.into_iter().map(Into::into).collect()
    }
}

impl<L: IntoLockKeys> IntoLockKeys for Option<L> {
    fn into_lock_keys(self) -> Vec<String> {
        self.map(IntoLockKeys::into_lock_keys).unwrap_or_default()
    }
}

impl<F, Req, L> MakeLockKeys<Req> for F
where
    F: Fn(&Req) -> L,
    L: IntoLockKeys,
{
    fn make_lock_keys(&self, req: &Req) -> Vec<String> {
        self(req).into_lock_keys()
    }
}

/// Tuples of single-key functions: the keys of those that give one.
macro_rules! tuple_keys {
    ($($k:ident),+) => {
        impl<Req, $($k),+> MakeLockKeys<Req> for ($($k,)+)
        where
            $($k: MakeLockKey<Req>),+
        {
            #[allow(non_snake_case)]
            fn make_lock_keys(&self, req: &Req) -> Vec<String> {
                let ($($k,)+) = self;
                [$($k.make_lock_key(req)),+].into_iter().flatten().collect()
            }
        }
    };
}

tuple_keys!(A);
tuple_keys!(A, B);
tuple_keys!(A, B, C);
tuple_keys!(A, B, C, D);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_arrays_options_and_tuples_are_key_functions() {
        let list = |n: &u8| vec![format!("a:{n}"), format!("b:{n}")];
        let array = |_: &u8| ["x", "y", "z"];
        let none = |_: &u8| None::<Vec<String>>;
        let some = |_: &u8| Some(["only"]);
        let empty = |_: &u8| Vec::<String>::new();
        assert_eq!(list.make_lock_keys(&1), ["a:1", "b:1"]);
        assert_eq!(array.make_lock_keys(&1), ["x", "y", "z"]);
        assert!(none.make_lock_keys(&1).is_empty());
        assert_eq!(some.make_lock_keys(&1), ["only"]);
        assert!(empty.make_lock_keys(&1).is_empty());

        let one = (|n: &u8| Some(format!("n:{n}")),);
        let skips_none = (
            |n: &u8| Some(format!("n:{n}")),
            |_: &u8| None::<String>,
            |_: &u8| Some("fixed"),
        );
        assert_eq!(one.make_lock_keys(&2), ["n:2"]);
        assert_eq!(skips_none.make_lock_keys(&2), ["n:2", "fixed"]);
        let nothing = (|_: &u8| None::<String>, |_: &u8| None::<String>);
        assert!(nothing.make_lock_keys(&2).is_empty());
    }
}
