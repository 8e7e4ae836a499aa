//! Deserialization helpers the stream assemblers share to read payloads
//! without copying them.

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A JSON string borrowed from the payload when it holds no escape, owned
/// (unescaped) otherwise. `Option<Cow<str>>` cannot do this: serde's `Cow`
/// always owns, and `&str` fails on escapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WireStr<'a>(pub(crate) Cow<'a, str>);

impl WireStr<'_> {
    /// The string, owned.
    pub(crate) fn into_owned(self) -> String {
        self.0.into_owned()
    }
}

impl Deref for WireStr<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for WireStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(WireStrVisitor)
    }
}

/// Reads a [`WireStr`] from a string, borrowed when the deserializer lends it.
struct WireStrVisitor;

impl<'de> Visitor<'de> for WireStrVisitor {
    type Value = WireStr<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(WireStr(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(WireStr(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(WireStr(Cow::Owned(v)))
    }
}

/// The scalar arms of a lenient visitor: anything but an object or an
/// array (with `@not_str`, anything but those and a string) is read as a
/// `Value` would read it and becomes `$none`.
macro_rules! scalars_are {
    (@not_str $none:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($none)
        }

        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($none)
        }

        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($none)
        }

        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($none)
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($none)
        }

        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok($none)
        }
    };
    ($none:expr) => {
        scalars_are!(@not_str $none);

        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($none)
        }
    };
}
pub(crate) use scalars_are;

/// A string field that is `None` when a server sends another type. Other
/// values are read as a `Value` would read them (so a number out of range is
/// an error as it would be there, see [`Skip`]), but only a string is kept,
/// borrowed when it can be.
#[derive(Debug, Default)]
pub(crate) struct LenientStr<'a>(pub(crate) Option<WireStr<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for LenientStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LenientStr<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                WireStrVisitor.visit_borrowed_str(v).map(|s| LenientStr(Some(s)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                WireStrVisitor.visit_str(v).map(|s| LenientStr(Some(s)))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                WireStrVisitor.visit_string(v).map(|s| LenientStr(Some(s)))
            }

            scalars_are!(@not_str LenientStr(None));

            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Skip.visit_seq(seq).map(|_| LenientStr(None))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                Skip.visit_map(map).map(|_| LenientStr(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// Any JSON value, read exactly as a `Value` would read it (every string
/// unescaped and checked, every number parsed and range-checked, nesting
/// counted against the same depth limit) and then dropped, without building
/// anything. Where serde's `IgnoredAny` only scans, this accepts and refuses
/// what the whole-value reading accepts and refuses, so a narrow reading that
/// skips fields with it decodes (and fails) exactly as the whole value would.
pub(crate) struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Skip)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = Skip;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    scalars_are!(Skip);

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Skip)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
        while map.next_entry::<Skip, Skip>()?.is_some() {}
        Ok(Skip)
    }
}

/// A struct read field by field from a JSON object by a hand-written visitor
/// ([`Object`], [`Strict`]): every key is offered in order, a repeated key
/// overwrites the earlier value (as a `Value` map keeps the last), and a
/// field the reader does not want is read as [`Skip`].
pub(crate) trait Fields<'de>: Default {
    /// Reads the value of `key` from `map` (exactly one `next_value`).
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

/// Reads (and drops) the value of a field nobody wants, as [`Skip`].
pub(crate) fn skip_value<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<Skip>().map(|_| ())
}

/// A [`Fields`] struct read from `map`.
pub(crate) fn read_fields<'de, T: Fields<'de>, A: MapAccess<'de>>(mut map: A) -> Result<T, A::Error> {
    let mut out = T::default();
    while let Some(key) = map.next_key::<WireStr<'de>>()? {
        out.field(&key, &mut map)?;
    }
    Ok(out)
}

/// A field that is an object read through [`Fields`], or `None` when it is
/// any other value (read and checked as a `Value` would be): what
/// `value.as_object()` / `value.get(key)` see.
pub(crate) struct Object<T>(pub(crate) Option<T>);

impl<T> Default for Object<T> {
    fn default() -> Self {
        Object(None)
    }
}

impl<'de, T: Fields<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Fields<'de>> Visitor<'de> for V<T> {
            type Value = Object<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }

            scalars_are!(Object(None));

            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Skip.visit_seq(seq).map(|_| Object(None))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                read_fields(map).map(|t| Object(Some(t)))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// An object read through [`Fields`]; any other value is an error worded as
/// a `Map<String, Value>` words it.
pub(crate) struct Strict<T>(pub(crate) T);

impl<'de, T: Fields<'de>> Deserialize<'de> for Strict<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Fields<'de>> Visitor<'de> for V<T> {
            type Value = Strict<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                read_fields(map).map(Strict)
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// A field that is an array of `T`, or `None` when it is any other value
/// (read and checked as a `Value` would be): what `value.as_array()` sees.
pub(crate) struct Array<T>(pub(crate) Option<Vec<T>>);

impl<T> Default for Array<T> {
    fn default() -> Self {
        Array(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Array<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Array<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }

            scalars_are!(Array(None));

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
                while let Some(t) = seq.next_element()? {
                    out.push(t);
                }
                Ok(Array(Some(out)))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                Skip.visit_map(map).map(|_| Array(None))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A struct read from a JSON object only. serde reads a struct from an array
/// too, by position; where the wire says "object", an array must fail.
pub(crate) struct MapOnly<T>(pub(crate) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for MapOnly<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = MapOnly<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(MapOnly)
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[derive(serde::Deserialize)]
    struct S<'a> {
        #[serde(borrow)]
        s: Option<WireStr<'a>>,
    }

    #[test]
    fn strings_without_escapes_are_borrowed() {
        let s: S<'_> = serde_json::from_str(r#"{"s":"plain é"}"#).unwrap();
        assert!(matches!(s.s.unwrap().0, Cow::Borrowed("plain é")));
        let s: S<'_> = serde_json::from_str(r#"{"s":"a\nb\u00e9"}"#).unwrap();
        assert_eq!(s.s.unwrap().0, Cow::<str>::Owned("a\nbé".into()));
        let s: S<'_> = serde_json::from_str(r#"{"s":null}"#).unwrap();
        assert!(s.s.is_none());
        assert!(serde_json::from_str::<S<'_>>(r#"{"s":1}"#).is_err());
    }

    #[derive(serde::Deserialize)]
    struct L<'a> {
        #[serde(default, borrow)]
        m: LenientStr<'a>,
    }

    #[test]
    fn lenient_strings_keep_strings_only_and_read_the_rest_as_values() {
        let m = |json: &str| serde_json::from_str::<L<'_>>(json).map(|l| l.m.0.map(WireStr::into_owned));
        assert_eq!(m(r#"{"m":"gpt"}"#).unwrap().as_deref(), Some("gpt"));
        assert_eq!(m(r#"{"m":"a\"b"}"#).unwrap().as_deref(), Some("a\"b"));
        for other in
            ["null", "1", "-1", "1.5", "true", "[1,{\"a\":[]}]", "{\"a\":{\"b\":null}}", "18446744073709551616"]
        {
            assert_eq!(m(&format!(r#"{{"m":{other}}}"#)).unwrap(), None, "{other}");
        }
        assert_eq!(m("{}").unwrap(), None);
        // What a `Value` refuses is refused here too.
        for bad in ["1e400", "[1e400]", "{\"a\":-1e400}"] {
            let want = serde_json::from_str::<Value>(&format!(r#"{{"m":{bad}}}"#)).unwrap_err().to_string();
            assert_eq!(m(&format!(r#"{{"m":{bad}}}"#)).unwrap_err().to_string(), want, "{bad}");
        }
    }

    #[test]
    fn map_only_refuses_arrays() {
        let ok: MapOnly<S<'_>> = serde_json::from_str(r#"{"s":"x","other":[1]}"#).unwrap();
        assert_eq!(ok.0.s.as_deref(), Some("x"));
        assert!(serde_json::from_str::<MapOnly<S<'_>>>(r#"["x"]"#).is_err());
        assert!(serde_json::from_str::<S<'_>>(r#"["x"]"#).is_ok(), "the case MapOnly exists for");
    }
}
