//! Per-window statistics of one tier's requests (the millibottleneck analysis).
//!
//! Design: the caller sorts (numpy's vectorised sort beats any scatter into per-window
//! buckets, which is bound by cache misses); this module makes the one pass over the sorted
//! arrival times, departure times and response-time keys that gives, for window
//! k = [k w, (k+1) w): the time-average number of requests in the tier, its maximum, the
//! completions and the mean / max / p99 of the response times of the requests completing in
//! it. Conventions (those of `tierscope.analysis.millibottlenecks`): a request is in the tier on
//! [start, end); a departure at the same instant as an arrival comes first; a window holds the
//! times t with k w <= t < (k+1) w; response-time keys are `(window << 40) | microseconds` (nearest),
//! sorted; the p99 is the smallest value at or above the 99th percentile (numpy's "higher").

use crate::error::NativeError;

/// Response-time keys: the low 40 bits hold microseconds, the bits above the window.
pub const RT_BITS: u32 = 40;
const RT_RESOLUTION: f64 = 1e-6;

/// Statistics of one tier on the grid.
#[derive(Debug, Clone, PartialEq)]
pub struct TierWindows {
    pub q_mean: Vec<f64>,
    pub q_max: Vec<f64>,
    pub completions: Vec<f64>,
    pub rt_mean: Vec<f64>,
    pub rt_max: Vec<f64>,
    pub rt_p99: Vec<f64>,
}

fn check_sorted(name: &str, v: &[f64]) -> Result<(), NativeError> {
    if let Some(i) = (1..v.len()).find(|&i| v[i - 1].partial_cmp(&v[i]).is_none_or(|o| o.is_gt())) {
        return Err(NativeError::InvalidValue {
            arg: format!("{name}[{i}]"),
            value: v[i],
            requirement: "sorted ascending and not NaN",
        });
    }
    Ok(())
}

/// The response-time sort keys `(window << 40) | microseconds` of the requests that complete
/// on the grid (0 <= end < n w), in input order (unsorted); times from the grid's origin.
/// The window is floor(end / w) (at most n - 1); negative response times count as 0.
pub fn rt_keys(start: &[f64], end: &[f64], width: f64, n: usize) -> Result<Vec<u64>, NativeError> {
    if start.len() != end.len() {
        return Err(NativeError::LengthMismatch {
            arg: "end".into(),
            got: end.len(),
            expected: start.len(),
            why: "one end per start",
        });
    }
    let horizon = n as f64 * width;
    let cap = (1u64 << RT_BITS) - 1;
    let mut keys = Vec::with_capacity(start.len());
    for (&s, &e) in start.iter().zip(end) {
        if e >= 0.0 && e < horizon {
            let w = ((e / width).floor() as u64).min(n as u64 - 1);
            // nearest microsecond (half up): a cast truncates, the times are >= 0
            let units = (((e - s).max(0.0) / RT_RESOLUTION + 0.5) as u64).min(cap);
            keys.push((w << RT_BITS) | units);
        }
    }
    Ok(keys)
}

/// One pass over sorted `starts`, `ends` (times from the grid's origin; +inf: never left)
/// and sorted response-time `keys`, on `n` windows of `width` seconds.
pub fn sweep(
    starts: &[f64],
    ends: &[f64],
    keys: &[u64],
    width: f64,
    n: usize,
) -> Result<TierWindows, NativeError> {
    if !(width > 0.0 && width.is_finite()) {
        return Err(NativeError::InvalidValue {
            arg: "width".into(),
            value: width,
            requirement: "a finite number > 0",
        });
    }
    check_sorted("starts", starts)?;
    check_sorted("ends", ends)?;
    if let Some(i) = (1..keys.len()).find(|&i| keys[i - 1] > keys[i]) {
        return Err(NativeError::InvalidValue {
            arg: format!("keys[{i}]"),
            value: keys[i] as f64,
            requirement: "sorted ascending",
        });
    }
    let mut out = TierWindows {
        q_mean: vec![0.0; n],
        q_max: vec![0.0; n],
        completions: vec![0.0; n],
        rt_mean: vec![f64::NAN; n],
        rt_max: vec![f64::NAN; n],
        rt_p99: vec![f64::NAN; n],
    };
    let (mut i, mut j, mut r) = (0usize, 0usize, 0usize);
    // requests that arrived, and left, strictly before the current window's start
    while i < starts.len() && starts[i] < 0.0 {
        i += 1;
    }
    while j < ends.len() && ends[j] < 0.0 {
        j += 1;
    }
    let mask = (1u64 << RT_BITS) - 1;
    for k in 0..n {
        let edge = k as f64 * width;
        let next = (k + 1) as f64 * width;
        let present = i as i64 - j as i64;
        // merge the window's departures and arrivals, departures first on ties
        let (i0, j0) = (i, j);
        let (mut sum_s, mut sum_e) = (0.0, 0.0);
        let mut cur = present;
        let mut at_edge: Option<i64> = None;
        let mut best = i64::MIN;
        loop {
            let end_next = j < ends.len() && ends[j] < next;
            let start_next = i < starts.len() && starts[i] < next;
            if !end_next && !start_next {
                break;
            }
            let take_end = end_next && (!start_next || ends[j] <= starts[i]);
            let t = if take_end { ends[j] } else { starts[i] };
            if at_edge.is_none() && t > edge {
                at_edge = Some(cur);
            }
            if take_end {
                sum_e += t;
                cur -= 1;
                j += 1;
            } else {
                sum_s += t;
                cur += 1;
                i += 1;
                best = best.max(cur);
            }
        }
        // time average: present at the edge, plus each arrival's remaining part of the
        // window, minus each departure's
        let (na, nd) = ((i - i0) as f64, (j - j0) as f64);
        let inside = (na * next - sum_s) - (nd * next - sum_e);
        out.q_mean[k] = present as f64 + inside / width;
        out.q_max[k] = best.max(at_edge.unwrap_or(cur)) as f64;

        let r0 = r;
        while r < keys.len() && (keys[r] >> RT_BITS) as usize == k {
            r += 1;
        }
        let c = r - r0;
        out.completions[k] = c as f64;
        if c > 0 {
            let slice = &keys[r0..r];
            let total: f64 = slice
                .iter()
                .map(|&u| (u & mask) as f64 * RT_RESOLUTION)
                .sum();
            out.rt_mean[k] = total / c as f64;
            out.rt_max[k] = (slice[c - 1] & mask) as f64 * RT_RESOLUTION;
            let rank = (0.99 * (c - 1) as f64 - 1e-9).ceil().max(0.0) as usize;
            out.rt_p99[k] = (slice[rank] & mask) as f64 * RT_RESOLUTION;
        }
    }
    if r != keys.len() {
        return Err(NativeError::InvalidValue {
            arg: format!("keys[{r}]"),
            value: (keys[r] >> RT_BITS) as f64,
            requirement: "a window below n",
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(start: &[f64], end: &[f64], width: f64, n: usize) -> Vec<u64> {
        let mut k = rt_keys(start, end, width, n).unwrap();
        k.sort_unstable();
        k
    }

    fn sorted(v: &[f64]) -> Vec<f64> {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v
    }

    #[test]
    fn small_case_by_hand() {
        let start = [0.01, 0.02, 0.049, 0.05, 0.12, 0.13];
        let end = [0.07, 0.05, 0.2, 0.06, f64::INFINITY, 0.131];
        let w = sweep(
            &sorted(&start),
            &sorted(&end),
            &keys(&start, &end, 0.05, 4),
            0.05,
            4,
        )
        .unwrap();
        // window 0: one request from 0.01, two from 0.02, three from 0.049
        let area0 = 0.04 + 0.03 + 0.001;
        assert!((w.q_mean[0] - area0 / 0.05).abs() < 1e-12);
        assert_eq!(w.q_max[0], 3.0);
        // at 0.05 one leaves as another arrives: still three; then 0.06 and 0.07 leave
        assert_eq!(w.q_max[1], 3.0);
        assert_eq!(w.completions[1], 3.0);
        assert!((w.rt_max[1] - 0.06).abs() < 1e-9);
        assert_eq!(w.completions[2], 1.0); // 0.131 (0.2 is the grid's end)
        assert!((w.rt_p99[2] - 0.001).abs() < 1e-9);
        assert!(w.rt_mean[3].is_nan());
        assert_eq!(w.q_max[3], 2.0); // 0.12 (never leaves) and 0.049 until 0.2
    }

    #[test]
    fn rejects_unsorted_input() {
        assert!(sweep(&[1.0, 0.0], &[], &[], 0.05, 1).is_err());
        assert!(sweep(&[], &[], &[], 0.0, 1).is_err());
        assert!(sweep(&[], &[], &[5 << RT_BITS], 0.05, 1).is_err());
    }

    #[test]
    #[ignore]
    fn speed_one_million_requests() {
        let n = 1_000_000usize;
        let mut x: u64 = 88172645463325252;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        let start: Vec<f64> = (0..n).map(|_| rnd() * 833.0).collect();
        let end: Vec<f64> = start.iter().map(|s| s + 0.002 * rnd()).collect();
        let (s, e, k) = (
            sorted(&start),
            sorted(&end),
            keys(&start, &end, 0.05, 16_700),
        );
        let t = std::time::Instant::now();
        let w = sweep(&s, &e, &k, 0.05, 16_700).unwrap();
        eprintln!(
            "sweep of 1M requests: {:?} ({} windows)",
            t.elapsed(),
            w.q_mean.len()
        );
    }
}
