//! Small typed accessors over `serde_json::Value` that know their JSON path.
//!
//! Design: the spec is walked by hand instead of through serde derive, so
//! every refusal can name the exact field (`stations[2].servers`) the Python
//! side must fix; serde's own messages only give a line and column.

use serde_json::{Map, Value};

use crate::error::{NativeError, Result};

/// The error for `field` with a human-readable `message`.
pub fn bad(field: impl Into<String>, message: impl Into<String>) -> NativeError {
    NativeError::InvalidSpec {
        field: field.into(),
        message: message.into(),
    }
}

/// `v` shortened for messages.
fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 60 {
        format!(
            "{}...",
            &s[..s.char_indices().nth(57).map_or(s.len(), |(i, _)| i)]
        )
    } else {
        s
    }
}

/// A JSON object together with its path.
#[derive(Clone, Copy)]
pub struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: &'a str,
}

/// Path of item `i` of the list at `path`.
pub fn item(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

impl<'a> Obj<'a> {
    /// `v` as an object, or an error naming `path`.
    pub fn new(v: &'a Value, path: &'a str) -> Result<Self> {
        match v.as_object() {
            Some(map) => Ok(Obj { map, path }),
            None => Err(bad(path, format!("expected an object, got {}", show(v)))),
        }
    }

    /// Path of `key` inside this object.
    pub fn at(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// The value of `key`; absent and `null` both give `None`.
    pub fn opt(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// Whether `key` is present (possibly `null`).
    pub fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// The value of `key`, `null` if absent.
    pub fn req_or_null(&self, key: &str) -> &'a Value {
        static NULL: Value = Value::Null;
        self.map.get(key).unwrap_or(&NULL)
    }

    /// The value of `key`, which must be present and not `null`.
    pub fn req(&self, key: &str) -> Result<&'a Value> {
        self.opt(key)
            .ok_or_else(|| bad(self.at(key), "is required"))
    }

    pub fn f64(&self, key: &str) -> Result<f64> {
        number(self.req(key)?, &self.at(key))
    }

    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>> {
        self.opt(key).map(|v| number(v, &self.at(key))).transpose()
    }

    pub fn count(&self, key: &str) -> Result<u64> {
        count(self.req(key)?, &self.at(key))
    }

    pub fn opt_count(&self, key: &str) -> Result<Option<u64>> {
        self.opt(key).map(|v| count(v, &self.at(key))).transpose()
    }

    pub fn str(&self, key: &str) -> Result<&'a str> {
        let v = self.req(key)?;
        v.as_str()
            .ok_or_else(|| bad(self.at(key), format!("expected a string, got {}", show(v))))
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<&'a str>> {
        match self.opt(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| bad(self.at(key), format!("expected a string, got {}", show(v)))),
        }
    }

    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.opt(key) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| {
                bad(
                    self.at(key),
                    format!("expected true or false, got {}", show(v)),
                )
            }),
        }
    }

    pub fn list(&self, key: &str) -> Result<&'a [Value]> {
        list(self.req(key)?, &self.at(key))
    }

    /// A list that may be absent or `null` (then empty).
    pub fn opt_list(&self, key: &str) -> Result<&'a [Value]> {
        match self.opt(key) {
            None => Ok(&[]),
            Some(v) => list(v, &self.at(key)),
        }
    }
}

/// `v` as a finite number.
pub fn number(v: &Value, path: &str) -> Result<f64> {
    match v.as_f64() {
        Some(x) if x.is_finite() => Ok(x),
        _ => Err(bad(
            path,
            format!("expected a finite number, got {}", show(v)),
        )),
    }
}

/// `v` as a non-negative integer (`3.0` is accepted as 3).
pub fn count(v: &Value, path: &str) -> Result<u64> {
    if let Some(n) = v.as_u64() {
        return Ok(n);
    }
    match v.as_f64() {
        Some(x) if x >= 0.0 && x.fract() == 0.0 && x < 9.0e15 => Ok(x as u64),
        _ => Err(bad(
            path,
            format!("expected a non-negative integer, got {}", show(v)),
        )),
    }
}

/// `v` as an index into a list of `len` items described by `what`.
pub fn index(v: &Value, path: &str, len: usize, what: &str) -> Result<usize> {
    let i = count(v, path)?;
    if (i as usize) < len && i < u32::MAX as u64 {
        Ok(i as usize)
    } else {
        Err(bad(
            path,
            format!("{i} is not a valid {what} index (there are {len})"),
        ))
    }
}

/// `v` as a list.
pub fn list<'a>(v: &'a Value, path: &str) -> Result<&'a [Value]> {
    v.as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| bad(path, format!("expected a list, got {}", show(v))))
}

/// `v` as a list of finite numbers.
pub fn numbers(v: &Value, path: &str) -> Result<Vec<f64>> {
    list(v, path)?
        .iter()
        .enumerate()
        .map(|(i, x)| number(x, &item(path, i)))
        .collect()
}
