//! How a key the file gives replaces the value of the layer below, for keys that need no
//! check of their own: [`set`], and the [`overlay!`] and [`overlay_within!`] macros that name
//! each such key once rather than once in the raw struct's read, once in the settings.

/// A key given in the file replaces the value below it.
pub(crate) fn set<T>(into: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *into = v;
    }
}

/// [`set`] for a setting that is optional itself.
pub(crate) fn set_some<T>(into: &mut Option<T>, value: Option<T>) {
    if value.is_some() {
        *into = value;
    }
}

/// Moves each named field the file gives from `$raw` into `$into` as it is: keys whose
/// values serde already checked (closed sets, flags, texts, lists).
macro_rules! overlay {
    ($into:expr, $raw:expr; $($field:ident),+ $(,)?) => {
        $( $crate::overlay::set(&mut $into.$field, $raw.$field); )+
    };
}

/// Moves each named number the file gives from `$raw` into `$into`, checked by the merger
/// `$merger` to lie in `$min..=$max` (and in the setting's type); `$key` makes the key's
/// name in a message from the field's.
macro_rules! overlay_within {
    ($merger:expr, $key:expr, $into:expr, $raw:expr;
     $($field:ident: $min:expr, $max:expr);+ $(;)?) => {{
        let key = $key;
        $(
            if let Some(v) = $merger.within(&key(stringify!($field)), $raw.$field, $min, $max)? {
                $into.$field = v;
            }
        )+
    }};
}
