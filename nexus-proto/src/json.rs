//! Reading JSON from bytes.

/// [`serde_json::from_slice`], with the UTF-8 check made once over the
/// whole input instead of once per string: bytes that are valid UTF-8 are
/// read as text (serde_json then checks no string again), anything else
/// goes through `from_slice`, so its errors are word for word what
/// `from_slice` says. Values, borrows and errors are `from_slice`'s.
pub fn from_bytes<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn it_reads_what_from_slice_reads_and_fails_where_it_fails() {
        let inputs: [&[u8]; 9] = [
            br#"{"a":"b\u00e9","c":[1,2.5,null,true]}"#,
            "{\"k\":\"ünï ☃\"}".as_bytes(),
            br#"{"a":"\ud800"}"#,
            br#"{"a":"\ud83d\ude00"}"#,
            br#"{"a":1"#,
            b"{\"a\":\"\xff\"}",
            b"\xef\xbb\xbf{}",
            b"[1,2]  x",
            b"",
        ];
        for bytes in inputs {
            let (ours, slice) = (from_bytes::<Value>(bytes), serde_json::from_slice::<Value>(bytes));
            match (ours, slice) {
                (Ok(a), Ok(b)) => assert_eq!(a, b),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{bytes:?}"),
                (a, b) => panic!("{bytes:?}: {a:?} against {b:?}"),
            }
        }
    }

    #[test]
    fn strings_without_escapes_are_still_borrowed() {
        #[derive(serde::Deserialize)]
        struct Borrowed<'a> {
            #[serde(borrow)]
            name: std::borrow::Cow<'a, str>,
        }
        let b: Borrowed<'_> = from_bytes(br#"{"name":"plain"}"#).unwrap();
        assert!(matches!(b.name, std::borrow::Cow::Borrowed("plain")));
    }
}
