//! URL, header and body templates with random parameters, rendered per request.
//!
//! Design: Python parses the `{int:1:10000}` syntax (so errors name the file and field)
//! and sends the parts; here they become a flat list rendered straight into the
//! request buffer with no allocation. A template without placeholders is one literal.

use std::io::Write;

use serde::Deserialize;

use crate::des::rng::Rng;
use crate::error::Result;

use super::config::bad;

/// One part of a template, as sent by Python.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartSpec {
    /// Literal text.
    Lit(String),
    /// A uniform random integer in `[lo, hi]`.
    Int([i64; 2]),
    /// One of the strings, uniformly.
    Choice(Vec<String>),
    /// The emulated user's number.
    User,
    /// The session's number.
    Session,
    /// The request's id (the value of X-Request-Id).
    RequestId,
}

#[derive(Debug, Clone)]
enum Part {
    Lit(Box<[u8]>),
    Int { lo: i64, span: u64 },
    Choice(Box<[Box<[u8]>]>),
    User,
    Session,
    RequestId,
}

/// Values a template can refer to.
#[derive(Debug, Clone, Copy)]
pub struct Vars<'a> {
    pub user: u64,
    pub session: u64,
    pub request_id: u64,
    pub id_prefix: &'a [u8],
}

/// A compiled template.
#[derive(Debug, Clone)]
pub struct Template {
    parts: Box<[Part]>,
}

impl Template {
    /// Compiles the parts; `field` names them in errors.
    pub fn compile(spec: &[PartSpec], field: &str) -> Result<Template> {
        let mut parts = Vec::with_capacity(spec.len());
        for (i, p) in spec.iter().enumerate() {
            let at = || format!("{field}[{i}]");
            parts.push(match p {
                PartSpec::Lit(s) => Part::Lit(s.as_bytes().into()),
                PartSpec::Int([lo, hi]) => {
                    if hi < lo {
                        return Err(bad(at(), format!("int range is empty: {lo}..{hi}")));
                    }
                    Part::Int {
                        lo: *lo,
                        span: (*hi as i128 - *lo as i128 + 1).min(u64::MAX as i128) as u64,
                    }
                }
                PartSpec::Choice(v) => {
                    if v.is_empty() {
                        return Err(bad(at(), "choice needs at least one option"));
                    }
                    Part::Choice(v.iter().map(|s| s.as_bytes().into()).collect())
                }
                PartSpec::User => Part::User,
                PartSpec::Session => Part::Session,
                PartSpec::RequestId => Part::RequestId,
            });
        }
        Ok(Template {
            parts: parts.into_boxed_slice(),
        })
    }

    /// Appends the rendered text to `out`.
    #[inline]
    pub fn render(&self, vars: &Vars<'_>, rng: &mut Rng, out: &mut Vec<u8>) {
        for p in self.parts.iter() {
            match p {
                Part::Lit(b) => out.extend_from_slice(b),
                Part::Int { lo, span } => {
                    let k = uniform_below(rng, *span);
                    let v = (*lo as i128 + k as i128) as i64;
                    let _ = write!(out, "{v}");
                }
                Part::Choice(v) => {
                    let k = uniform_below(rng, v.len() as u64) as usize;
                    out.extend_from_slice(&v[k]);
                }
                Part::User => push_u64(out, vars.user),
                Part::Session => push_u64(out, vars.session),
                Part::RequestId => {
                    out.extend_from_slice(vars.id_prefix);
                    push_u64(out, vars.request_id);
                }
            }
        }
    }
}

/// Appends the decimal digits of `v` (cheaper than `write!`, which runs once per request).
#[inline]
pub fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Uniform integer in `[0, n)` without modulo bias (Lemire's method); `n = 0` means 2^64.
#[inline]
pub fn uniform_below(rng: &mut Rng, n: u64) -> u64 {
    if n == 0 {
        return rng.next_u64();
    }
    let mut m = (rng.next_u64() as u128) * (n as u128);
    if (m as u64) < n {
        let threshold = n.wrapping_neg() % n;
        while (m as u64) < threshold {
            m = (rng.next_u64() as u128) * (n as u128);
        }
    }
    (m >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vars<'static> {
        Vars {
            user: 7,
            session: 3,
            request_id: 42,
            id_prefix: b"run1-",
        }
    }

    #[test]
    fn literal_and_variables_render() {
        let t = Template::compile(
            &[
                PartSpec::Lit("/u/".into()),
                PartSpec::User,
                PartSpec::Lit("/s/".into()),
                PartSpec::Session,
                PartSpec::Lit("?r=".into()),
                PartSpec::RequestId,
            ],
            "path",
        )
        .unwrap();
        let mut out = Vec::new();
        t.render(&vars(), &mut Rng::stream(1, 0, 0), &mut out);
        assert_eq!(out, b"/u/7/s/3?r=run1-42");
    }

    #[test]
    fn random_integers_cover_the_range_uniformly() {
        let t = Template::compile(&[PartSpec::Int([-2, 2])], "p").unwrap();
        let mut rng = Rng::stream(5, 0, 0);
        let mut counts = [0u32; 5];
        for _ in 0..50_000 {
            let mut out = Vec::new();
            t.render(&vars(), &mut rng, &mut out);
            let v: i64 = std::str::from_utf8(&out).unwrap().parse().unwrap();
            counts[(v + 2) as usize] += 1;
        }
        // Each cell expects 10,000 with sd 89; 5 sd is a safe bound.
        for c in counts {
            assert!((c as i64 - 10_000).abs() < 450, "{counts:?}");
        }
    }

    #[test]
    fn choices_and_bad_ranges() {
        let t = Template::compile(&[PartSpec::Choice(vec!["a".into(), "b".into()])], "p").unwrap();
        let mut rng = Rng::stream(5, 0, 0);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..100 {
            let mut out = Vec::new();
            t.render(&vars(), &mut rng, &mut out);
            seen.insert(out);
        }
        assert_eq!(seen.len(), 2);
        assert!(Template::compile(&[PartSpec::Int([3, 2])], "p").is_err());
        assert!(Template::compile(&[PartSpec::Choice(vec![])], "p").is_err());
    }

    #[test]
    fn integers_format_like_display() {
        for v in [0u64, 7, 10, 99, 12345, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, v);
            assert_eq!(out, v.to_string().as_bytes());
        }
    }

    #[test]
    fn uniform_below_is_in_range() {
        let mut rng = Rng::stream(9, 0, 0);
        for n in [1u64, 2, 3, 7, 1000, u64::MAX] {
            for _ in 0..1000 {
                assert!(uniform_below(&mut rng, n) < n);
            }
        }
    }
}
