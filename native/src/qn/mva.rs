//! Exact multi-class Mean Value Analysis (MVA) for closed product-form
//! queueing networks with delay, load-independent and load-dependent
//! (multi-server) stations.
//!
//! Design decisions:
//! - The population lattice `{n : 0 <= n <= N}` is swept layer by layer
//!   (total population `t = 1..|N|`), keeping only layers `t-1` and `t` in
//!   two preallocated flat buffers. A point is located inside its layer by
//!   combinatorial ranking of bounded compositions (prefix-summed count
//!   table, so a rank costs O(C)); each layer is enumerated in rank order.
//! - Throughputs come from the usual arrival-theorem MVA step. For a
//!   load-dependent station the residence time needs the marginals
//!   `p_k(j | n - e_c)`; `p_k(j)` for `j >= 1` follows from the standard
//!   product recursion, but the idle probability `p_k(0|n)` must NOT be
//!   obtained by subtraction (`1 - sum p(j)` or the equivalent utilisation
//!   identity): near saturation its absolute rounding error is amplified by
//!   up to `m^j / j!` per population step, and the recursion blows up from
//!   about 10 servers on (X off by 60% at m = 16). Instead
//!   `p_k(0|n) = G_{-k}(n) / G(n)` is carried exactly by *normalised
//!   convolution chains*: every partial normalising constant `v` is stored
//!   as `v(n) / G(n)`, which stays in `[0, 1]` (no overflow, no scaling) and
//!   advances with the MVA throughputs as multipliers, e.g.
//!   `r(n) = r_in(n) + sum_c (D_ck / a) X_c(n) r(n - e_c)`. Only additions
//!   of non-negative terms occur, so every quantity keeps full relative
//!   accuracy. The chains for all `G_{-k}` share prefixes by divide and
//!   conquer over the load-dependent stations (`O(K log K)` station
//!   applications for K such stations); networks without load-dependent
//!   stations run plain MVA with no chain at all.
//! - Rates beyond `|N|` never matter, so `L_k` is capped at `|N| + 1`.
//! - Nothing is allocated inside the per-population loop.

use crate::error::{NativeError, Result};

/// Upper bound on the number of `f64` values held by one lattice layer (and
/// on the size of the count table); two layers at this size take 2 GiB.
const MAX_LAYER_VALUES: u128 = 1 << 27;

/// How one station serves jobs, with what the MVA step needs precomputed.
#[derive(Debug, Clone)]
enum Station {
    /// Infinite server: residence time equals demand.
    Delay,
    /// Single rate `alpha`, stored as its inverse.
    Fixed { inv_rate: f64 },
    /// Rate depends on the queue length up to `l >= 2` jobs.
    LoadDep(LoadDep),
}

#[derive(Debug, Clone)]
struct LoadDep {
    /// Effective number of distinct rates, `min(L_k, |N| + 1)`, at least 2.
    l: usize,
    inv_a_last: f64,
    /// `1/alpha(j)` for `j = 1..l-1` (`[0]` unused).
    inv_alpha: Vec<f64>,
    /// `(j+1)/alpha(j+1)` for `j = 0..l-2`: residence weight of `p(j)`.
    w_coef: Vec<f64>,
    /// `L_k` as given by the caller (length of the returned marginals).
    user_len: usize,
    /// Offset of the chain node applying this station to `G_{-k}`.
    top_off: usize,
    /// Offset of that node's input value `G_{-k}/G = p_k(0|n)`.
    top_input: usize,
}

/// One step of a normalised convolution chain; its state lives at `off`
/// inside each lattice point and its value is a ratio `v(n) / G(n)`.
#[derive(Debug, Clone)]
struct Node {
    kind: NodeKind,
    /// Offset of the input node's value (unused for `Base`).
    input: usize,
    off: usize,
}

#[derive(Debug, Clone)]
enum NodeKind {
    /// Delays and think times, merged: `f(n) = prod_c Z'_c^{n_c} / n_c!`.
    /// State: `[r]`.
    Base,
    /// Applies a load-independent station. State: `[r]`.
    Fixed { station: usize, inv_rate: f64 },
    /// Applies a load-dependent station. State `[r or t1, h_1..h_{l-1}, t]`
    /// where `h_j` is the mass with `j` jobs at the station, `t` the mass
    /// with `>= l` and `t1` its first moment; a `top` node (input
    /// `G_{-k}`) stores `t1` in slot 0 because its own value is 1.
    LoadDep { station: usize, top: bool },
}

/// A validated closed network, flattened for the solver.
#[derive(Debug, Clone)]
pub struct ClosedNetwork {
    classes: usize,
    stations: usize,
    /// `demands[c * stations + k]`.
    demands: Vec<f64>,
    /// Think time plus all delay-station demands of each class.
    delay_total: Vec<f64>,
    populations: Vec<usize>,
    kinds: Vec<Station>,
    /// Indices of load-independent stations; their queue totals open each
    /// lattice point, in this order.
    fixed: Vec<usize>,
    /// `fixed_dem[c * fixed.len() + f]` = `D_ck / alpha_k` for `k = fixed[f]`.
    fixed_dem: Vec<f64>,
    /// Indices of load-dependent stations.
    ld: Vec<usize>,
    nodes: Vec<Node>,
    /// Values per lattice point: fixed-station queue totals, then chains.
    stride: usize,
}

/// Exact MVA results at the full population `N`.
#[derive(Debug, Clone, PartialEq)]
pub struct MvaSolution {
    /// `X[c]`, class throughputs (0 for empty classes).
    pub throughput: Vec<f64>,
    /// `Q[c][k]`, mean number of class-`c` jobs at station `k`.
    pub queue: Vec<Vec<f64>>,
    /// `W[c][k]`, residence time of class `c` at station `k`.
    pub residence: Vec<Vec<f64>>,
    /// `p_k(j | N)` for `j = 0..L_k-1` for non-delay stations with `L_k > 1`,
    /// empty otherwise.
    pub marginals: Vec<Vec<f64>>,
}

fn check_len(arg: &str, got: usize, expected: usize, why: &'static str) -> Result<()> {
    if got == expected {
        Ok(())
    } else {
        Err(NativeError::LengthMismatch {
            arg: arg.to_string(),
            got,
            expected,
            why,
        })
    }
}

fn check_value(arg: impl FnOnce() -> String, value: f64, positive: bool) -> Result<()> {
    let ok = value.is_finite() && if positive { value > 0.0 } else { value >= 0.0 };
    if ok {
        Ok(())
    } else {
        Err(NativeError::InvalidValue {
            arg: arg(),
            value,
            requirement: if positive {
                "finite and > 0"
            } else {
                "finite and >= 0"
            },
        })
    }
}

/// Builds the chain nodes; `next_off` is the first free offset in a point.
struct ChainBuilder<'a> {
    kinds: &'a mut [Station],
    nodes: Vec<Node>,
    next_off: usize,
}

impl ChainBuilder<'_> {
    fn push(&mut self, kind: NodeKind, input: usize) -> usize {
        let size = match &kind {
            NodeKind::LoadDep { station, .. } => match &self.kinds[*station] {
                Station::LoadDep(ld) => ld.l + 1,
                _ => 1,
            },
            _ => 1,
        };
        let off = self.next_off;
        self.next_off += size;
        self.nodes.push(Node { kind, input, off });
        off
    }

    fn apply_all(&mut self, mut input: usize, stations: &[usize]) -> usize {
        for &k in stations {
            input = self.push(
                NodeKind::LoadDep {
                    station: k,
                    top: false,
                },
                input,
            );
        }
        input
    }

    /// `input` is `G` of everything except `set`; emits, for each `k` in
    /// `set`, the node applying `k` to `G_{-k}` (divide and conquer).
    fn build(&mut self, set: &[usize], input: usize) {
        if let [k] = set {
            let off = self.push(
                NodeKind::LoadDep {
                    station: *k,
                    top: true,
                },
                input,
            );
            if let Station::LoadDep(ld) = &mut self.kinds[*k] {
                ld.top_off = off;
                ld.top_input = input;
            }
            return;
        }
        let (a, b) = set.split_at(set.len() / 2);
        let without_a = self.apply_all(input, b);
        self.build(a, without_a);
        let without_b = self.apply_all(input, a);
        self.build(b, without_b);
    }
}

impl ClosedNetwork {
    /// Validates the raw arguments (see `mva_exact` for their meaning).
    pub fn new(
        demands: &[Vec<f64>],
        delay: &[bool],
        alphas: &[Vec<f64>],
        populations: &[i64],
        think: &[f64],
    ) -> Result<Self> {
        let classes = demands.len();
        let stations = delay.len();
        let per_class = "one entry per class, as in demands";
        let per_station = "one entry per station, as in delay";
        check_len("populations", populations.len(), classes, per_class)?;
        check_len("think", think.len(), classes, per_class)?;
        check_len("alphas", alphas.len(), stations, per_station)?;

        let mut flat = Vec::with_capacity(classes * stations);
        for (c, row) in demands.iter().enumerate() {
            check_len(&format!("demands[{c}]"), row.len(), stations, per_station)?;
            for (k, &d) in row.iter().enumerate() {
                check_value(|| format!("demands[{c}][{k}]"), d, false)?;
            }
            flat.extend_from_slice(row);
        }
        for (c, &z) in think.iter().enumerate() {
            check_value(|| format!("think[{c}]"), z, false)?;
        }
        let mut pops = Vec::with_capacity(classes);
        for (c, &p) in populations.iter().enumerate() {
            let p = usize::try_from(p)
                .map_err(|_| NativeError::NegativePopulation { index: c, value: p })?;
            pops.push(p);
        }
        for (c, &pop) in pops.iter().enumerate() {
            let total_demand: f64 = flat[c * stations..(c + 1) * stations].iter().sum();
            if pop > 0 && total_demand == 0.0 && think[c] == 0.0 {
                return Err(NativeError::UnboundedThroughput { class: c });
            }
        }
        let delay_total: Vec<f64> = (0..classes)
            .map(|c| {
                let row = &flat[c * stations..(c + 1) * stations];
                think[c]
                    + row
                        .iter()
                        .zip(delay)
                        .filter(|(_, &is_delay)| is_delay)
                        .map(|(d, _)| d)
                        .sum::<f64>()
            })
            .collect();

        let total: usize = pops.iter().sum();
        let mut kinds = Vec::with_capacity(stations);
        for (k, (&is_delay, a)) in delay.iter().zip(alphas).enumerate() {
            if is_delay {
                kinds.push(Station::Delay);
                continue;
            }
            if a.is_empty() {
                return Err(NativeError::Empty {
                    arg: format!("alphas[{k}]"),
                    why: "a queueing station needs at least one rate multiplier",
                });
            }
            for (j, &v) in a.iter().enumerate() {
                check_value(|| format!("alphas[{k}][{j}]"), v, true)?;
            }
            if a.len() == 1 {
                kinds.push(Station::Fixed {
                    inv_rate: 1.0 / a[0],
                });
                continue;
            }
            // Rates beyond |N| are never used; the cap bounds the work.
            let l = a.len().min(total + 1).max(2);
            let inv_a_last = 1.0 / a[l - 1];
            let mut inv_alpha = vec![0.0; l];
            for j in 1..l {
                inv_alpha[j] = 1.0 / a[j - 1];
            }
            let w_coef = (0..l - 1).map(|j| (j + 1) as f64 / a[j]).collect();
            kinds.push(Station::LoadDep(LoadDep {
                l,
                inv_a_last,
                inv_alpha,
                w_coef,
                user_len: a.len(),
                top_off: 0,
                top_input: 0,
            }));
        }

        let fixed: Vec<usize> = (0..stations)
            .filter(|&k| matches!(kinds[k], Station::Fixed { .. }))
            .collect();
        let mut fixed_dem = Vec::with_capacity(classes * fixed.len());
        for c in 0..classes {
            for &k in &fixed {
                if let Station::Fixed { inv_rate } = kinds[k] {
                    fixed_dem.push(flat[c * stations + k] * inv_rate);
                }
            }
        }
        // Chains exist only to give load-dependent stations an exact p(0).
        let ld: Vec<usize> = (0..stations)
            .filter(|&k| matches!(kinds[k], Station::LoadDep(_)))
            .collect();
        let mut builder = ChainBuilder {
            kinds: &mut kinds,
            nodes: Vec::new(),
            next_off: fixed.len(),
        };
        if !ld.is_empty() {
            let mut input = builder.push(NodeKind::Base, 0);
            for k in 0..stations {
                if let Station::Fixed { inv_rate } = builder.kinds[k] {
                    input = builder.push(
                        NodeKind::Fixed {
                            station: k,
                            inv_rate,
                        },
                        input,
                    );
                }
            }
            builder.build(&ld, input);
        }
        let (nodes, stride) = (builder.nodes, builder.next_off);

        Ok(Self {
            classes,
            stations,
            demands: flat,
            delay_total,
            populations: pops,
            kinds,
            fixed,
            fixed_dem,
            ld,
            nodes,
            stride,
        })
    }
}

/// Ranks bounded compositions of a layer and enumerates them in rank order.
struct Lattice {
    classes: usize,
    total: usize,
    bounds: Vec<usize>,
    /// `tail[c] = sum_{i >= c} N_i`.
    tail: Vec<usize>,
    /// `cum[c * (total+1) + s]` = number of ways classes `c..C-1` sum to at
    /// most `s` within bounds.
    cum: Vec<usize>,
    /// Largest layer size.
    max_layer: usize,
}

impl Lattice {
    fn new(bounds: &[usize], stride: usize) -> Result<Self> {
        let classes = bounds.len();
        let total: usize = bounds.iter().sum();
        let width = total + 1;
        let too_large = |needed: u128| NativeError::LatticeTooLarge {
            needed,
            limit: MAX_LAYER_VALUES,
        };
        let table = (classes as u128 + 1) * width as u128;
        if table > MAX_LAYER_VALUES {
            return Err(too_large(table));
        }
        let mut tail = vec![0; classes + 1];
        for c in (0..classes).rev() {
            tail[c] = tail[c + 1] + bounds[c];
        }
        // Row C: only the empty sum exists, so cum is 1 everywhere.
        let mut cum = vec![0usize; (classes + 1) * width];
        cum[classes * width..].fill(1);
        let mut max_layer = 1;
        for c in (0..classes).rev() {
            let (head, next) = cum.split_at_mut((c + 1) * width);
            let row = &mut head[c * width..];
            let mut running: usize = 0;
            for s in 0..width {
                // count[c][s] = sum_{v=0}^{min(N_c,s)} count[c+1][s-v]
                //            = cum[c+1][s] - cum[c+1][s-N_c-1]
                let below = if s > bounds[c] {
                    next[s - bounds[c] - 1]
                } else {
                    0
                };
                let count = next[s] - below;
                if c == 0 {
                    max_layer = max_layer.max(count);
                }
                // Overflow means more than 2^64 lattice points: hopeless anyway.
                running = running
                    .checked_add(count)
                    .ok_or_else(|| too_large(u128::from(u64::MAX)))?;
                row[s] = running;
            }
        }
        let needed = max_layer as u128 * stride.max(1) as u128;
        if needed > MAX_LAYER_VALUES {
            return Err(too_large(needed));
        }
        Ok(Self {
            classes,
            total,
            bounds: bounds.to_vec(),
            tail,
            cum,
            max_layer,
        })
    }

    #[inline]
    fn cum(&self, c: usize, s: usize) -> usize {
        self.cum[c * (self.total + 1) + s]
    }

    /// Rank within layer `t - 1` of `n - e_d`, where `n` lies in layer `t`.
    #[inline]
    fn rank_minus(&self, n: &[usize], t: usize, d: usize) -> usize {
        let mut s = t - 1;
        let mut r = 0;
        for (c, &nc) in n[..self.classes - 1].iter().enumerate() {
            let nc = nc - usize::from(c == d);
            // Points with a smaller entry at position c come first.
            r += self.cum(c + 1, s) - self.cum(c + 1, s - nc);
            s -= nc;
        }
        r
    }

    /// Fills positions `from..` with the lexicographically smallest tail
    /// summing to `rem`.
    #[inline]
    fn fill_min(&self, n: &mut [usize], from: usize, mut rem: usize) {
        for (slot, &cap) in n[from..].iter_mut().zip(&self.tail[from + 1..]) {
            let v = rem.saturating_sub(cap);
            *slot = v;
            rem -= v;
        }
    }

    /// Advances `n` to the next composition of its layer; false at the end.
    #[inline]
    fn next(&self, n: &mut [usize]) -> bool {
        let Some(&last) = n.last() else {
            return false;
        };
        let mut suffix = last;
        for c in (0..self.classes - 1).rev() {
            if n[c] < self.bounds[c] && suffix > 0 {
                n[c] += 1;
                self.fill_min(n, c + 1, suffix - 1);
                return true;
            }
            suffix += n[c];
        }
        false
    }
}

/// Preallocated per-point work space of `solve`.
struct Work {
    n: Vec<usize>,
    /// Offset of the layer-(t-1) point `n - e_c` (valid when `n_c > 0`).
    pred: Vec<usize>,
    x: Vec<f64>,
    /// Residence times at fixed stations, `[c * fixed.len() + f]`.
    w_fixed: Vec<f64>,
    /// Residence times at load-dependent stations, `[c * ld.len() + i]`.
    w_ld: Vec<f64>,
    /// Accumulators of one load-dependent chain node.
    acc: Vec<f64>,
    /// `fx[c * stations + k] = D_ck X_c(n)` (0 for absent classes).
    fx: Vec<f64>,
}

/// Arrival-theorem step: residence times and throughputs at point `n`.
fn mva_step(net: &ClosedNetwork, prev: &[f64], work: &mut Work) {
    let (nm, nf, nl) = (net.stations, net.fixed.len(), net.ld.len());
    for c in 0..net.classes {
        if work.n[c] == 0 {
            work.x[c] = 0.0;
            continue;
        }
        let base = &prev[work.pred[c]..work.pred[c] + net.stride];
        // Think time and delay stations contribute constant residence.
        let mut sum_w = net.delay_total[c];
        let wf = &mut work.w_fixed[c * nf..(c + 1) * nf];
        let df = &net.fixed_dem[c * nf..(c + 1) * nf];
        for ((w, &d), &q) in wf.iter_mut().zip(df).zip(&base[..nf]) {
            *w = d * (1.0 + q);
            sum_w += *w;
        }
        let wl = &mut work.w_ld[c * nl..(c + 1) * nl];
        for (w, &k) in wl.iter_mut().zip(&net.ld) {
            let dk = net.demands[c * nm + k];
            *w = match &net.kinds[k] {
                Station::LoadDep(ld) if dk > 0.0 => {
                    // W = D * sum_j (j+1)/alpha(j+1) p(j | n - e_c), all terms >= 0.
                    let s = &base[ld.top_off..ld.top_off + ld.l + 1];
                    let mut acc = ld.w_coef[0] * base[ld.top_input];
                    for (wj, pj) in ld.w_coef[1..].iter().zip(&s[1..ld.l - 1]) {
                        acc += wj * pj;
                    }
                    let tail = ld.l as f64 * s[ld.l - 1] + s[0] + s[ld.l];
                    dk * (acc + tail * ld.inv_a_last)
                }
                _ => 0.0,
            };
            sum_w += *w;
        }
        work.x[c] = work.n[c] as f64 / sum_w;
    }
}

/// Advances every chain node to point `n` (state written to `out`).
fn chain_step(net: &ClosedNetwork, prev: &[f64], out: &mut [f64], work: &mut Work) {
    let (nc, nm) = (net.classes, net.stations);
    // D_ck X_c(n), zero for absent classes so nodes need no extra branch.
    for c in 0..nc {
        let x = if work.n[c] > 0 { work.x[c] } else { 0.0 };
        for (f, &d) in work.fx[c * nm..(c + 1) * nm]
            .iter_mut()
            .zip(&net.demands[c * nm..(c + 1) * nm])
        {
            *f = d * x;
        }
    }
    for node in &net.nodes {
        match node.kind {
            NodeKind::Base => {
                // f(n) = f(n - e_c) Z'_c / n_c for any c with n_c > 0.
                let c = work.n.iter().position(|&v| v > 0).unwrap_or(0);
                let r = prev[work.pred[c] + node.off];
                out[node.off] = r * net.delay_total[c] * work.x[c] / work.n[c] as f64;
            }
            NodeKind::Fixed { station, inv_rate } => {
                let mut r = 0.0;
                for c in 0..nc {
                    let f = work.fx[c * nm + station];
                    if f > 0.0 {
                        r += f * prev[work.pred[c] + node.off];
                    }
                }
                out[node.off] = out[node.input] + r * inv_rate;
            }
            NodeKind::LoadDep { station, top } => {
                let Station::LoadDep(ld) = &net.kinds[station] else {
                    continue;
                };
                let l = ld.l;
                let acc = &mut work.acc[..=l];
                acc.fill(0.0);
                for c in 0..nc {
                    let f = work.fx[c * nm + station];
                    if f == 0.0 {
                        continue;
                    }
                    let p = work.pred[c];
                    let s = &prev[p + node.off..p + node.off + l + 1];
                    // h_j(n) gets mass from h_{j-1}(n - e_c); h_0 is the input.
                    acc[1] += f * prev[p + node.input];
                    for (a, &h) in acc[2..l].iter_mut().zip(&s[1..l - 1]) {
                        *a += f * h;
                    }
                    acc[l] += f * (s[l - 1] + s[l]);
                    if top {
                        acc[0] += f * (l as f64 * s[l - 1] + s[0] + s[l]);
                    }
                }
                let input = out[node.input];
                let s = &mut out[node.off..node.off + l + 1];
                let mut mass = 0.0;
                for ((h, &a), &ia) in s[1..l].iter_mut().zip(&acc[1..l]).zip(&ld.inv_alpha[1..l]) {
                    *h = a * ia;
                    mass += *h;
                }
                s[l] = acc[l] * ld.inv_a_last;
                s[0] = if top {
                    acc[0] * ld.inv_a_last
                } else {
                    mass + s[l] + input
                };
            }
        }
    }
}

/// Solves the network exactly at its full population.
pub fn solve(net: &ClosedNetwork) -> Result<MvaSolution> {
    let (nc, nm, stride) = (net.classes, net.stations, net.stride);
    let (nf, nl) = (net.fixed.len(), net.ld.len());
    let lat = Lattice::new(&net.populations, stride)?;
    let total = lat.total;

    // Layer 0 (empty network): every ratio v(0)/G(0) is 1, all masses 0.
    let mut prev = vec![0.0; lat.max_layer * stride];
    let mut cur = vec![0.0; lat.max_layer * stride];
    for node in &net.nodes {
        if !matches!(node.kind, NodeKind::LoadDep { top: true, .. }) {
            prev[node.off] = 1.0;
        }
    }
    let max_l = net
        .kinds
        .iter()
        .map(|s| match s {
            Station::LoadDep(ld) => ld.l,
            _ => 0,
        })
        .max()
        .unwrap_or(0);
    let mut work = Work {
        n: vec![0; nc],
        pred: vec![0; nc],
        x: vec![0.0; nc],
        w_fixed: vec![0.0; nc * net.fixed.len()],
        w_ld: vec![0.0; nc * net.ld.len()],
        acc: vec![0.0; max_l + 1],
        fx: vec![0.0; nc * nm],
    };

    for t in 1..=total {
        lat.fill_min(&mut work.n, 0, t);
        let mut r = 0;
        loop {
            for c in 0..nc {
                if work.n[c] > 0 {
                    work.pred[c] = lat.rank_minus(&work.n, t, c) * stride;
                }
            }
            mva_step(net, &prev, &mut work);
            let out = &mut cur[r * stride..(r + 1) * stride];
            let q = &mut out[..nf];
            q.fill(0.0);
            for c in (0..nc).filter(|&c| work.n[c] > 0) {
                let x = work.x[c];
                for (qf, &w) in q.iter_mut().zip(&work.w_fixed[c * nf..(c + 1) * nf]) {
                    *qf += x * w;
                }
            }
            chain_step(net, &prev, out, &mut work);
            r += 1;
            if !lat.next(&mut work.n) {
                break;
            }
        }
        debug_assert_eq!(r, lat.cum(0, t) - lat.cum(0, t - 1));
        std::mem::swap(&mut prev, &mut cur);
    }

    // The last layer holds only N itself (now in `prev`, rank 0).
    let mut throughput = vec![0.0; nc];
    let mut queue = vec![vec![0.0; nm]; nc];
    let mut residence = vec![vec![0.0; nm]; nc];
    for c in 0..nc {
        if net.populations[c] == 0 {
            continue;
        }
        let x = work.x[c];
        throughput[c] = x;
        let w = &mut residence[c];
        // Delay stations keep W = D; the others are overwritten below.
        w.copy_from_slice(&net.demands[c * nm..(c + 1) * nm]);
        for (f, &k) in net.fixed.iter().enumerate() {
            w[k] = work.w_fixed[c * nf + f];
        }
        for (i, &k) in net.ld.iter().enumerate() {
            w[k] = work.w_ld[c * nl + i];
        }
        for (q, &wk) in queue[c].iter_mut().zip(w.iter()) {
            *q = x * wk;
        }
    }
    let marginals = net
        .kinds
        .iter()
        .map(|s| match s {
            Station::LoadDep(ld) => {
                let mut p = vec![0.0; ld.user_len];
                if total == 0 {
                    p[0] = 1.0;
                } else {
                    p[0] = prev[ld.top_input];
                    p[1..ld.l].copy_from_slice(&prev[ld.top_off + 1..ld.top_off + ld.l]);
                }
                p
            }
            _ => Vec::new(),
        })
        .collect();
    Ok(MvaSolution {
        throughput,
        queue,
        residence,
        marginals,
    })
}

/// Exact multi-class MVA: validates the arguments and solves at `N`.
///
/// `demands[c][k]` is `V_ck * S_ck` at rate multiplier 1, `delay[k]` marks
/// infinite-server stations, `alphas[k]` are the rate multipliers
/// `alpha_k(1..L_k)` (held constant beyond `L_k`; ignored for delay
/// stations), `populations[c] >= 0` and `think[c] >= 0` is a per-class
/// implicit delay.
pub fn mva_exact(
    demands: &[Vec<f64>],
    delay: &[bool],
    alphas: &[Vec<f64>],
    populations: &[i64],
    think: &[f64],
) -> Result<MvaSolution> {
    solve(&ClosedNetwork::new(
        demands,
        delay,
        alphas,
        populations,
        think,
    )?)
}

#[cfg(test)]
// Index loops mirror the textbook formulas the tests check against.
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;

    fn single(n: usize) -> Vec<Vec<f64>> {
        vec![vec![1.0]; n]
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    fn rel_close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1e-300)
    }

    fn servers(m: usize) -> Vec<f64> {
        (1..=m).map(|j| j as f64).collect()
    }

    /// ln(sum exp(v)) without overflow.
    fn log_sum_exp(v: &[f64]) -> f64 {
        let m = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        m + v.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
    }

    /// Machine-repairman M/M/m//N with think time z and demand d:
    /// p(n) ∝ N!/(N-n)! (d/z)^n / prod_{j<=n} min(j,m). Returns (X, p).
    fn repairman(m: usize, pop: usize, d: f64, z: f64) -> (f64, Vec<f64>) {
        let mut logw = Vec::with_capacity(pop + 1);
        let mut acc = 0.0;
        logw.push(0.0);
        for n in 1..=pop {
            acc += ((pop - n + 1) as f64).ln() + (d / z).ln() - (n.min(m) as f64).ln();
            logw.push(acc);
        }
        let lg = log_sum_exp(&logw);
        let p: Vec<f64> = logw.iter().map(|l| (l - lg).exp()).collect();
        let x = p
            .iter()
            .enumerate()
            .map(|(n, pn)| pn * n.min(m) as f64 / d)
            .sum();
        (x, p)
    }

    #[test]
    fn bolch_example_8_3() {
        let s = [0.02, 0.2, 0.4, 0.6];
        let v = [1.0, 0.4, 0.2, 0.1];
        let d: Vec<f64> = s.iter().zip(v).map(|(s, v)| s * v).collect();
        let sol = mva_exact(&[d], &[false; 4], &single(4), &[6], &[0.0]).expect("valid");
        assert!(
            close(sol.throughput[0], 9.920, 1e-3),
            "{:?}",
            sol.throughput
        );
        for (q, want) in sol.queue[0].iter().zip([0.244, 2.261, 2.261, 1.234]) {
            assert!(close(*q, want, 1e-3), "{:?}", sol.queue);
        }
        let total: f64 = sol.queue[0].iter().sum();
        assert!(close(total, 6.0, 1e-12));
    }

    #[test]
    fn jain_central_server() {
        let sol = mva_exact(
            &[vec![2.0, 3.0, 1.0]],
            &[false; 3],
            &single(3),
            &[20],
            &[4.0],
        )
        .expect("valid");
        let x = sol.throughput[0];
        assert!(close(x, 0.33325, 1e-3), "X = {x}");
        assert!(
            close(20.0 / x - 4.0, 56.016, 1e-3),
            "R = {}",
            20.0 / x - 4.0
        );
        let r: f64 = sol.residence[0].iter().sum();
        assert!(close(r, 20.0 / x - 4.0, 1e-9));
    }

    #[test]
    fn lazowska_two_classes() {
        let sol = mva_exact(
            &[vec![1.0, 3.0], vec![2.0, 4.0]],
            &[false; 2],
            &single(2),
            &[1, 1],
            &[0.0, 0.0],
        )
        .expect("valid");
        assert!(close(sol.throughput[0], 3.0 / 19.0, 1e-12));
        assert!(close(sol.throughput[1], 2.0 / 19.0, 1e-12));
    }

    #[test]
    fn multiserver_matches_repairman() {
        let (m, pop, d, z) = (4, 30, 1.0, 5.0);
        let sol =
            mva_exact(&[vec![d]], &[false], &[servers(m)], &[pop as i64], &[z]).expect("valid");
        let (x, p) = repairman(m, pop, d, z);
        assert!(
            rel_close(sol.throughput[0], x, 1e-12),
            "{} vs {x}",
            sol.throughput[0]
        );
        let q: f64 = p.iter().enumerate().map(|(n, pn)| n as f64 * pn).sum();
        assert!(rel_close(sol.queue[0][0], q, 1e-10));
        for j in 0..m {
            assert!(close(sol.marginals[0][j], p[j], 1e-12));
        }
    }

    #[test]
    fn multiserver_stable_near_saturation() {
        let (m, pop, d, z) = (8, 200, 1.0, 0.5);
        let sol =
            mva_exact(&[vec![d]], &[false], &[servers(m)], &[pop as i64], &[z]).expect("valid");
        let (x, p) = repairman(m, pop, d, z);
        assert!(close(p.iter().sum::<f64>(), 1.0, 1e-12));
        assert!(
            rel_close(sol.throughput[0], x, 1e-9),
            "{} vs {x}",
            sol.throughput[0]
        );
        let pk = &sol.marginals[0];
        assert_eq!(pk.len(), m);
        assert!(pk.iter().all(|&v| (0.0..=1.0).contains(&v)), "{pk:?}");
        for j in 0..m {
            assert!(close(pk[j], p[j], 1e-12), "p({j}) {} vs {}", pk[j], p[j]);
        }
        // Utilisation identity closes the distribution: sum p(j) + P(n>=m) = 1.
        let util = x * d;
        let tail = (util - (1..m).map(|j| j as f64 * pk[j]).sum::<f64>()) / m as f64;
        assert!(close(pk.iter().sum::<f64>() + tail, 1.0, 1e-12));
        let q: f64 = p.iter().enumerate().map(|(n, pn)| n as f64 * pn).sum();
        assert!(rel_close(sol.queue[0][0], q, 1e-9));
    }

    #[test]
    fn load_dependent_list_equals_multiserver() {
        let demands = [vec![0.3, 1.0, 0.7], vec![0.5, 0.2, 0.9]];
        let short = [vec![1.0], servers(3), vec![1.0]];
        let long = [
            vec![1.0],
            vec![1.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0],
            vec![1.0],
        ];
        let a = mva_exact(&demands, &[false; 3], &short, &[4, 3], &[1.0, 2.0]).expect("valid");
        let b = mva_exact(&demands, &[false; 3], &long, &[4, 3], &[1.0, 2.0]).expect("valid");
        for c in 0..2 {
            assert!(rel_close(a.throughput[c], b.throughput[c], 1e-13));
            for k in 0..3 {
                assert!(close(a.queue[c][k], b.queue[c][k], 1e-12));
            }
        }
        assert_eq!(b.marginals[1].len(), 7);
        for j in 0..3 {
            assert!(close(a.marginals[1][j], b.marginals[1][j], 1e-13));
        }
        // A constant-rate list is a load-independent station of that speed.
        let c = mva_exact(
            &demands,
            &[false; 3],
            &[vec![2.0], vec![2.0, 2.0], vec![1.0]],
            &[4, 3],
            &[1.0, 2.0],
        )
        .expect("valid");
        let half = [vec![0.15, 0.5, 0.7], vec![0.25, 0.1, 0.9]];
        let e = mva_exact(&half, &[false; 3], &single(3), &[4, 3], &[1.0, 2.0]).expect("valid");
        for cl in 0..2 {
            assert!(rel_close(c.throughput[cl], e.throughput[cl], 1e-13));
        }
    }

    #[test]
    fn many_servers_stay_exact() {
        // The subtraction-based p(0) recursion is off by >50% on the first
        // three cases; the chains must stay at rounding level.
        for (m, pop, z) in [
            (16usize, 120usize, 0.5),
            (32, 1000, 0.5),
            (64, 2000, 10.0),
            (200, 3000, 1.0),
            (32, 40, 8.0),
        ] {
            let sol = mva_exact(&[vec![1.0]], &[false], &[servers(m)], &[pop as i64], &[z])
                .expect("valid");
            let (x, p) = repairman(m, pop, 1.0, z);
            let q: f64 = p.iter().enumerate().map(|(n, pn)| n as f64 * pn).sum();
            let tag = format!("m={m} N={pop} Z={z}");
            assert!(
                rel_close(sol.throughput[0], x, 1e-9),
                "{tag}: X {} vs {x}",
                sol.throughput[0]
            );
            assert!(
                rel_close(sol.queue[0][0], q, 1e-9),
                "{tag}: Q {} vs {q}",
                sol.queue[0][0]
            );
            for j in 0..m {
                let want = p.get(j).copied().unwrap_or(0.0);
                assert!(close(sol.marginals[0][j], want, 1e-12), "{tag}: p({j})");
            }
        }
    }

    /// Brute-force product form: G(pop) and the mean queue lengths at pop.
    fn brute_force(
        demands: &[Vec<f64>],
        delay: &[bool],
        alphas: &[Vec<f64>],
        think: &[f64],
        pop: &[usize],
    ) -> (f64, Vec<Vec<f64>>) {
        let (nc, nm) = (demands.len(), delay.len());
        // Think time is an extra delay station, column nm.
        let cols = nm + 1;
        fn compositions(n: usize, parts: usize) -> Vec<Vec<usize>> {
            if parts == 1 {
                return vec![vec![n]];
            }
            let mut out = Vec::new();
            for v in 0..=n {
                for mut rest in compositions(n - v, parts - 1) {
                    rest.insert(0, v);
                    out.push(rest);
                }
            }
            out
        }
        let fact = |n: usize| (1..=n).map(|i| i as f64).product::<f64>();
        let per_class: Vec<Vec<Vec<usize>>> = pop.iter().map(|&n| compositions(n, cols)).collect();
        let mut g = 0.0;
        let mut q = vec![vec![0.0; nm]; nc];
        let mut idx = vec![0usize; nc];
        loop {
            let state: Vec<&Vec<usize>> = (0..nc).map(|c| &per_class[c][idx[c]]).collect();
            let mut f = 1.0;
            for k in 0..cols {
                let nk: usize = state.iter().map(|s| s[k]).sum();
                let dem = |c: usize| if k == nm { think[c] } else { demands[c][k] };
                if k == nm || delay[k] {
                    for c in 0..nc {
                        f *= dem(c).powi(state[c][k] as i32) / fact(state[c][k]);
                    }
                } else {
                    f *= fact(nk);
                    for c in 0..nc {
                        f *= dem(c).powi(state[c][k] as i32) / fact(state[c][k]);
                    }
                    let a = &alphas[k];
                    for j in 1..=nk {
                        f /= a[(j - 1).min(a.len() - 1)];
                    }
                }
            }
            g += f;
            for c in 0..nc {
                for k in 0..nm {
                    q[c][k] += f * state[c][k] as f64;
                }
            }
            let mut c = 0;
            while c < nc {
                idx[c] += 1;
                if idx[c] < per_class[c].len() {
                    break;
                }
                idx[c] = 0;
                c += 1;
            }
            if c == nc {
                break;
            }
        }
        for row in &mut q {
            for v in row.iter_mut() {
                *v /= g;
            }
        }
        (g, q)
    }

    #[test]
    fn multiclass_load_dependent_matches_brute_force() {
        let demands = vec![vec![0.4, 1.2, 0.3, 0.8, 0.5], vec![0.9, 0.5, 0.0, 1.1, 0.2]];
        let delay = [true, false, false, false, false];
        let alphas = vec![
            vec![],
            servers(2),
            vec![1.0],
            vec![1.0, 1.8, 2.5, 3.0],
            vec![0.7, 1.3],
        ];
        let think = [1.5, 0.0];
        let pop = [4usize, 3];
        let sol = mva_exact(&demands, &delay, &alphas, &[4, 3], &think).expect("valid");
        let (g, q) = brute_force(&demands, &delay, &alphas, &think, &pop);
        for c in 0..2 {
            let mut less = pop;
            less[c] -= 1;
            let (g_less, _) = brute_force(&demands, &delay, &alphas, &think, &less);
            let x = g_less / g;
            assert!(
                rel_close(sol.throughput[c], x, 1e-9),
                "X[{c}] {} vs {x}",
                sol.throughput[c]
            );
            for k in 0..5 {
                assert!(
                    close(sol.queue[c][k], q[c][k], 1e-9),
                    "Q[{c}][{k}] {} vs {}",
                    sol.queue[c][k],
                    q[c][k]
                );
                if sol.throughput[c] > 0.0 {
                    assert!(close(
                        sol.residence[c][k],
                        sol.queue[c][k] / sol.throughput[c],
                        1e-12
                    ));
                }
            }
        }
        assert!(sol.marginals[0].is_empty() && sol.marginals[2].is_empty());
        assert_eq!(sol.marginals[3].len(), 4);
    }

    #[test]
    fn three_classes_match_brute_force() {
        let demands = vec![
            vec![0.2, 0.6, 0.1],
            vec![0.5, 0.1, 0.3],
            vec![0.1, 0.4, 0.4],
        ];
        let delay = [false, false, true];
        let alphas = vec![servers(3), vec![1.0], vec![1.0]];
        let think = [0.5, 1.0, 0.0];
        let pop = [3usize, 0, 2];
        let sol = mva_exact(&demands, &delay, &alphas, &[3, 0, 2], &think).expect("valid");
        let (g, q) = brute_force(&demands, &delay, &alphas, &think, &pop);
        assert_eq!(sol.throughput[1], 0.0);
        assert!(sol.residence[1].iter().all(|&v| v == 0.0));
        for c in [0, 2] {
            let mut less = pop;
            less[c] -= 1;
            let x = brute_force(&demands, &delay, &alphas, &think, &less).0 / g;
            assert!(rel_close(sol.throughput[c], x, 1e-10));
            for k in 0..3 {
                assert!(close(sol.queue[c][k], q[c][k], 1e-10));
            }
        }
    }

    #[test]
    fn empty_population_and_empty_network() {
        let sol = mva_exact(
            &[vec![1.0, 2.0]],
            &[false, false],
            &[vec![1.0], servers(2)],
            &[0],
            &[0.0],
        )
        .expect("valid");
        assert_eq!(sol.throughput, vec![0.0]);
        assert_eq!(sol.queue, vec![vec![0.0, 0.0]]);
        assert_eq!(sol.marginals[1], vec![1.0, 0.0]);
        let none = mva_exact(&[], &[], &[], &[], &[]).expect("valid");
        assert!(none.throughput.is_empty());
        // Think time only: X = N / Z.
        let z = mva_exact(&[vec![]], &[], &[], &[5], &[2.0]).expect("valid");
        assert!(close(z.throughput[0], 2.5, 1e-15));
    }

    #[test]
    fn large_single_class_and_lattice() {
        let pop = 10_000;
        let mut d: Vec<f64> = (0..100).map(|k| 0.001 * (1 + k % 7) as f64).collect();
        d[0] = 0.01; // one clear bottleneck
        let sol =
            mva_exact(&[d.clone()], &[false; 100], &single(100), &[pop], &[1.0]).expect("valid");
        // Bottleneck law: X -> 1 / max D at saturation.
        assert!(rel_close(sol.throughput[0], 1.0 / 0.01, 1e-9));
        assert!(close(
            sol.queue[0].iter().sum::<f64>() + sol.throughput[0],
            pop as f64,
            1e-6
        ));

        let demands: Vec<Vec<f64>> = (0..3)
            .map(|c| (0..9).map(|k| 0.01 * (1 + (c + k) % 5) as f64).collect())
            .collect();
        let alphas: Vec<Vec<f64>> = (0..9)
            .map(|k| if k % 3 == 0 { servers(4) } else { vec![1.0] })
            .collect();
        let sol = mva_exact(
            &demands,
            &[false; 9],
            &alphas,
            &[40, 40, 40],
            &[0.5, 1.0, 2.0],
        )
        .expect("valid");
        for c in 0..3 {
            let jobs = sol.queue[c].iter().sum::<f64>() + sol.throughput[c] * [0.5, 1.0, 2.0][c];
            assert!(close(jobs, 40.0, 1e-9), "class {c}: {jobs}");
        }
    }

    #[test]
    fn lattice_ranks_are_dense_and_ordered() {
        let bounds = [2usize, 0, 3, 1];
        let lat = Lattice::new(&bounds, 1).expect("small");
        let total = 6;
        let mut seen = 0;
        for t in 0..=total {
            let mut n = vec![0; 4];
            lat.fill_min(&mut n, 0, t);
            let mut r = 0;
            let mut last: Option<Vec<usize>> = None;
            loop {
                assert_eq!(n.iter().sum::<usize>(), t);
                assert!(n.iter().zip(&bounds).all(|(a, b)| a <= b));
                if let Some(prev) = &last {
                    assert!(prev < &n);
                }
                for d in 0..4 {
                    if n[d] > 0 {
                        let mut m = n.clone();
                        m[d] -= 1;
                        // Rank of m computed by counting lexicographically smaller points.
                        let want = lexicographic_rank(&bounds, &m);
                        assert_eq!(lat.rank_minus(&n, t, d), want);
                    }
                }
                last = Some(n.clone());
                r += 1;
                if !lat.next(&mut n) {
                    break;
                }
            }
            seen += r;
        }
        assert_eq!(seen, 3 * 4 * 2);
    }

    fn lexicographic_rank(bounds: &[usize], m: &[usize]) -> usize {
        let t: usize = m.iter().sum();
        let mut count = 0;
        let mut n = vec![0usize; bounds.len()];
        loop {
            if n.iter().sum::<usize>() == t && n.as_slice() < m {
                count += 1;
            }
            let mut i = bounds.len();
            loop {
                if i == 0 {
                    return count;
                }
                i -= 1;
                if n[i] < bounds[i] {
                    n[i] += 1;
                    n[i + 1..].fill(0);
                    break;
                }
            }
        }
    }

    #[test]
    fn validation_names_argument_and_index() {
        let ok_d = vec![vec![1.0, 1.0]];
        let err = |r: Result<MvaSolution>| r.expect_err("must fail").to_string();
        let e = err(mva_exact(
            &[vec![1.0]],
            &[false, false],
            &single(2),
            &[1],
            &[0.0],
        ));
        assert!(e.contains("demands[0]") && e.contains("length 1"), "{e}");
        let e = err(mva_exact(
            &[vec![1.0, -2.0]],
            &[false, false],
            &single(2),
            &[1],
            &[0.0],
        ));
        assert!(e.contains("demands[0][1]"), "{e}");
        let e = err(mva_exact(
            &[vec![1.0, f64::NAN]],
            &[false, false],
            &single(2),
            &[1],
            &[0.0],
        ));
        assert!(e.contains("demands[0][1]"), "{e}");
        let e = err(mva_exact(
            &ok_d,
            &[false, false],
            &[vec![1.0], vec![]],
            &[1],
            &[0.0],
        ));
        assert!(e.contains("alphas[1]"), "{e}");
        let e = err(mva_exact(
            &ok_d,
            &[false, false],
            &[vec![1.0], vec![1.0, 0.0]],
            &[1],
            &[0.0],
        ));
        assert!(e.contains("alphas[1][1]"), "{e}");
        let e = err(mva_exact(&ok_d, &[false, false], &single(2), &[-1], &[0.0]));
        assert!(e.contains("populations[0]"), "{e}");
        let e = err(mva_exact(&ok_d, &[false, false], &single(2), &[1], &[-0.5]));
        assert!(e.contains("think[0]"), "{e}");
        let e = err(mva_exact(&ok_d, &[false, false], &single(1), &[1], &[0.0]));
        assert!(e.contains("alphas has length 1"), "{e}");
        let e = err(mva_exact(
            &ok_d,
            &[false, false],
            &single(2),
            &[1, 2],
            &[0.0],
        ));
        assert!(e.contains("populations"), "{e}");
        let e = err(mva_exact(
            &[vec![0.0, 0.0]],
            &[false, false],
            &single(2),
            &[3],
            &[0.0],
        ));
        assert!(e.contains("class 0"), "{e}");
        let big = vec![vec![1.0]; 12];
        let e = err(mva_exact(
            &big,
            &[false],
            &single(1),
            &[100; 12],
            &[0.0; 12],
        ));
        assert!(e.contains("too large"), "{e}");
        // Alphas of delay stations are ignored, even if empty.
        assert!(mva_exact(&ok_d, &[true, false], &[vec![], vec![1.0]], &[1], &[0.0]).is_ok());
    }

    #[test]
    fn several_load_dependent_stations_match_brute_force() {
        // Four LD stations exercise the divide-and-conquer chains; one has
        // non-monotone rates, and the second class saturates a 3-server pool.
        let demands = vec![
            vec![0.3, 0.9, 0.2, 0.5, 0.4, 0.6],
            vec![0.8, 1.6, 0.1, 0.3, 0.7, 0.2],
        ];
        let delay = [true, false, false, false, false, false];
        let alphas = vec![
            vec![],
            servers(3),
            vec![2.0, 1.0, 1.5],
            vec![1.0, 1.8, 2.5, 3.0],
            vec![1.0],
            servers(2),
        ];
        let think = [0.4, 0.0];
        let pop = [5usize, 4];
        let sol = mva_exact(&demands, &delay, &alphas, &[5, 4], &think).expect("valid");
        let (g, q) = brute_force(&demands, &delay, &alphas, &think, &pop);
        for c in 0..2 {
            let mut less = pop;
            less[c] -= 1;
            let x = brute_force(&demands, &delay, &alphas, &think, &less).0 / g;
            assert!(
                rel_close(sol.throughput[c], x, 1e-10),
                "X[{c}] {} vs {x}",
                sol.throughput[c]
            );
            for k in 0..6 {
                assert!(close(sol.queue[c][k], q[c][k], 1e-10), "Q[{c}][{k}]");
            }
        }
        // Marginals sum to at most one and agree with the mean queue length.
        for k in [1, 2, 3, 5] {
            let p = &sol.marginals[k];
            assert_eq!(p.len(), alphas[k].len());
            assert!(p.iter().all(|&v| v >= 0.0) && p.iter().sum::<f64>() <= 1.0 + 1e-12);
        }
        let total_jobs: f64 = (0..2)
            .map(|c| sol.queue[c].iter().sum::<f64>() + sol.throughput[c] * think[c])
            .sum();
        assert!(close(total_jobs, 9.0, 1e-10));
    }

    #[test]
    fn random_networks_match_brute_force() {
        // Small random networks: mixed delay / fixed / non-monotone LD rates,
        // zero demands and think times, empty classes.
        let mut seed: u64 = 12345;
        let mut rnd = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut solved = 0;
        for case in 0..300 {
            let nc = 1 + (rnd() * 3.0) as usize;
            let nm = 1 + (rnd() * 4.0) as usize;
            let demands: Vec<Vec<f64>> = (0..nc)
                .map(|_| {
                    (0..nm)
                        .map(|_| if rnd() < 0.15 { 0.0 } else { 2.0 * rnd() })
                        .collect()
                })
                .collect();
            let delay: Vec<bool> = (0..nm).map(|_| rnd() < 0.2).collect();
            let alphas: Vec<Vec<f64>> = (0..nm)
                .map(|_| {
                    let l = 1 + (rnd() * 5.0) as usize;
                    (0..l).map(|_| 0.3 + 3.0 * rnd()).collect()
                })
                .collect();
            let think: Vec<f64> = (0..nc)
                .map(|_| if rnd() < 0.3 { 0.0 } else { 3.0 * rnd() })
                .collect();
            let pop: Vec<usize> = (0..nc)
                .map(|_| (rnd() * [9.0, 6.0, 4.0][nc - 1]) as usize)
                .collect();
            let popi: Vec<i64> = pop.iter().map(|&p| p as i64).collect();
            let Ok(sol) = mva_exact(&demands, &delay, &alphas, &popi, &think) else {
                continue; // unbounded class (no demand, no think time)
            };
            solved += 1;
            let (g, q) = brute_force(&demands, &delay, &alphas, &think, &pop);
            for c in 0..nc {
                if pop[c] == 0 {
                    assert_eq!(sol.throughput[c], 0.0);
                    continue;
                }
                let mut less = pop.clone();
                less[c] -= 1;
                let x = brute_force(&demands, &delay, &alphas, &think, &less).0 / g;
                assert!(rel_close(sol.throughput[c], x, 1e-10), "case {case} X[{c}]");
                for k in 0..nm {
                    assert!(
                        close(sol.queue[c][k], q[c][k], 1e-9),
                        "case {case} Q[{c}][{k}]"
                    );
                }
            }
        }
        assert!(solved > 250);
    }
}
