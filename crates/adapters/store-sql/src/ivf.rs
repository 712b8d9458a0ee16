//! The arithmetic of the vector index (ADR-041), free of the database: spherical k-means
//! over unit vectors, nearest lists, int8 codes, a vector's stored bytes and a model's trained
//! lists. `vindex` keeps its results in tables; a leaf that `vectors`, `vindex` and `vlists`
//! all read (issue #28).

/// Below this many vectors of a model, semantic search stays exact (a scan of a few
/// megabytes; an index would only lose recall): `StoreOptions::vector_index_min`'s default.
pub(crate) const MIN_INDEXED: usize = 5_000;
/// k-means rounds; the centroids barely move after this on embeddings.
const ROUNDS: usize = 8;
/// Training vectors per list: a sample, since training on all of 100k vectors costs
/// seconds for no better lists.
const SAMPLE_PER_LIST: usize = 32;

/// A vector as stored.
pub(crate) fn encode(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A stored vector, or `None` when the bytes are not whole `f32`s.
pub(crate) fn decode(bytes: &[u8]) -> Option<Vec<f32>> {
    bytes.len().is_multiple_of(4).then(|| {
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    })
}

/// A model's trained lists.
#[derive(Debug)]
pub(crate) struct Trained {
    pub(crate) version: i64,
    pub(crate) dims: usize,
    pub(crate) lists: usize,
    pub(crate) centroids: Vec<f32>,
    /// Lists a query reads: calibrated at training, 0 for an index trained before that.
    pub(crate) probes: usize,
}

impl Trained {
    /// Lists a query reads at first.
    pub(crate) fn probes(&self) -> usize {
        probes_in_use(self.lists, self.probes)
    }
}

/// The dot product, in eight lanes so the compiler vectorises it.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// `vector` scaled to length 1 (a zero vector stays zero).
pub(crate) fn normalised(mut vector: Vec<f32>) -> Vec<f32> {
    let norm = dot(&vector, &vector).sqrt();
    if norm > 0.0 {
        for x in &mut vector {
            *x /= norm;
        }
    }
    vector
}

/// How many lists for `n` vectors: about √n, so a list and the centroid table are each
/// about √n entries.
pub(crate) fn lists_for(n: usize) -> usize {
    ((n as f64).sqrt().round() as usize).clamp(1, 4096)
}

/// How many lists a query reads when the index has no calibrated count (one trained by a
/// fabric before calibration): a fifth of them, at least 16. Measured on 20k clustered
/// vectors whose neighbourhoods span clusters (the recall test): a sixteenth gave recall@10
/// 0.81, an eighth 0.92, a sixth 0.96, a fifth 0.97.
pub(crate) fn probes_for(lists: usize) -> usize {
    lists.div_ceil(5).max(16).min(lists)
}

/// Lists a query reads first: the calibrated count, or (`calibrated` 0: an index trained
/// before calibration) [`probes_for`]; 0 without lists.
pub(crate) fn probes_in_use(lists: usize, calibrated: usize) -> usize {
    match (lists, calibrated) {
        (0, _) => 0,
        (l, 0) => probes_for(l),
        (l, p) => p.min(l),
    }
}

/// Stored vectors used as calibration queries at training.
pub(crate) const CALIBRATION_QUERIES: usize = 64;
/// The recall@10 the calibrated probe count must reach on the calibration queries (the
/// target is 0.95; the margin covers queries unlike the stored vectors).
const CALIBRATION_RECALL: f64 = 0.98;
/// Fewest lists a calibrated query reads.
const MIN_PROBES: usize = 8;
/// Neighbours per calibration query.
const K: usize = 10;

/// Chooses the probe count at training time from the data itself: a few stored vectors act
/// as queries, every vector of the model is observed once (with the list it was filed
/// under), and the count is the fewest nearest lists that hold enough of each query's
/// exact ten nearest neighbours.
#[derive(Debug, Default)]
pub(crate) struct Calibration {
    dims: usize,
    ids: Vec<String>,
    queries: Vec<f32>,
    /// Per query: its best `K` neighbours so far, as (similarity, list).
    top: Vec<Vec<(f32, usize)>>,
}

impl Calibration {
    /// Calibration against these stored vectors (unit vectors of `dims`).
    pub(crate) fn new(dims: usize, queries: Vec<(String, Vec<f32>)>) -> Self {
        let mut out = Self {
            dims,
            ..Self::default()
        };
        for (id, v) in queries.into_iter().filter(|(_, v)| v.len() == dims) {
            out.ids.push(id);
            out.queries.extend(v);
            out.top.push(Vec::with_capacity(K + 1));
        }
        out
    }

    /// Takes one stored vector into account (`list`: where it is filed).
    pub(crate) fn observe(&mut self, id: &str, vector: &[f32], list: usize) {
        if vector.len() != self.dims || self.dims == 0 {
            return;
        }
        for (q, query) in self.queries.chunks_exact(self.dims).enumerate() {
            if self.ids[q] == id {
                continue;
            }
            let s = dot(query, vector);
            let top = &mut self.top[q];
            if top.len() < K || s > top[top.len() - 1].0 {
                let at = top.partition_point(|(t, _)| *t >= s);
                top.insert(at, (s, list));
                top.truncate(K);
            }
        }
    }

    /// The fewest lists a query must read for recall@10 ≥ `CALIBRATION_RECALL` on the
    /// calibration queries, at least `MIN_PROBES`; `None` without queries.
    pub(crate) fn probes(&self, centroids: &[f32], lists: usize) -> Option<usize> {
        let (dims, count) = (self.dims, self.top.len());
        if count == 0 || lists == 0 {
            return None;
        }
        // needed[r]: neighbours (over all queries) whose list is the r-th nearest one.
        let mut needed = vec![0usize; lists];
        let mut total = 0usize;
        for (query, top) in self.queries.chunks_exact(dims).zip(&self.top) {
            let order = nearest(centroids, dims, query, lists);
            let mut rank = vec![0usize; lists];
            for (r, list) in order.iter().enumerate() {
                rank[*list] = r;
            }
            for (_, list) in top {
                needed[rank[(*list).min(lists - 1)]] += 1;
            }
            total += top.len();
        }
        let mut found = 0usize;
        for (r, n) in needed.iter().enumerate() {
            found += n;
            if found as f64 >= CALIBRATION_RECALL * total as f64 {
                return Some((r + 1).max(MIN_PROBES).min(lists));
            }
        }
        Some(lists)
    }
}

/// The `n` centroids nearest `query` (by dot product), nearest first.
pub(crate) fn nearest(centroids: &[f32], dims: usize, query: &[f32], n: usize) -> Vec<usize> {
    let mut scored: Vec<(usize, f32)> = centroids
        .chunks_exact(dims)
        .map(|c| dot(c, query))
        .enumerate()
        .collect();
    let n = n.min(scored.len());
    if n == 0 {
        return Vec::new();
    }
    scored.select_nth_unstable_by(n - 1, |a, b| b.1.total_cmp(&a.1));
    scored.truncate(n);
    scored.sort_unstable_by(|a, b| b.1.total_cmp(&a.1));
    scored.into_iter().map(|(i, _)| i).collect()
}

/// The nearest centroid.
pub(crate) fn assign(centroids: &[f32], dims: usize, vector: &[f32]) -> usize {
    nearest(centroids, dims, vector, 1)
        .first()
        .copied()
        .unwrap_or(0)
}

/// A tiny deterministic generator (splitmix64), so training is reproducible.
struct Mix(u64);

impl Mix {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n.max(1) as u64) as usize
    }
}

/// Trains `lists` centroids on `sample` (unit vectors, `dims` each) by spherical k-means:
/// assign each vector to its most similar centroid, move each centroid to its members'
/// normalised mean; an emptied list is re-seeded with a random sample vector.
pub(crate) fn train(sample: &[f32], dims: usize, lists: usize) -> Vec<f32> {
    let n = sample.len() / dims.max(1);
    let lists = lists.min(n).max(1);
    if n == 0 {
        return Vec::new();
    }
    let mut mix = Mix(0x5EED ^ n as u64);
    // Seeds: `lists` distinct sample vectors, spread by a stride from a random start.
    let start = mix.below(n);
    let mut centroids: Vec<f32> = (0..lists)
        .flat_map(|i| {
            let at = (start + i * n / lists) % n;
            sample[at * dims..(at + 1) * dims].iter().copied()
        })
        .collect();
    let mut members = vec![0usize; n];
    for _ in 0..ROUNDS {
        for (i, v) in sample.chunks_exact(dims).enumerate() {
            members[i] = assign(&centroids, dims, v);
        }
        let mut sums = vec![0.0f32; lists * dims];
        let mut counts = vec![0usize; lists];
        for (i, v) in sample.chunks_exact(dims).enumerate() {
            counts[members[i]] += 1;
            let sum = &mut sums[members[i] * dims..(members[i] + 1) * dims];
            for (s, x) in sum.iter_mut().zip(v) {
                *s += x;
            }
        }
        for (list, count) in counts.iter().enumerate() {
            let at = if *count == 0 {
                let pick = mix.below(n);
                sample[pick * dims..(pick + 1) * dims].to_vec()
            } else {
                normalised(sums[list * dims..(list + 1) * dims].to_vec())
            };
            centroids[list * dims..(list + 1) * dims].copy_from_slice(&at);
        }
    }
    centroids
}

/// Which of `n` vectors to train on: all when few, else an even spread of
/// `lists × SAMPLE_PER_LIST`.
pub(crate) fn sample_stride(n: usize, lists: usize) -> usize {
    n.div_ceil((lists * SAMPLE_PER_LIST).max(1)).max(1)
}

/// A unit vector as an int8 code: its scale (`f32`, little-endian), then one signed byte per
/// dimension. A quarter of the `f32` size; the scan's scores are re-ranked exactly.
pub(crate) fn quantise(vector: &[f32]) -> Vec<u8> {
    let max = vector.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
    let mut code = Vec::with_capacity(4 + vector.len());
    code.extend(scale.to_le_bytes());
    // In range by construction: |x / scale| ≤ 127.
    #[allow(clippy::cast_possible_truncation)]
    code.extend(vector.iter().map(|x| (x / scale).round() as i8 as u8));
    code
}

/// The approximate dot product of a code with `query`; `None` when the sizes differ.
pub(crate) fn approx_dot(code: &[u8], query: &[f32]) -> Option<f32> {
    let (scale, bytes) = code.split_first_chunk::<4>()?;
    if bytes.len() != query.len() {
        return None;
    }
    let mut lanes = [0.0f32; 8];
    let (cb, cq) = (bytes.chunks_exact(8), query.chunks_exact(8));
    let tail: f32 = cb
        .remainder()
        .iter()
        .zip(cq.remainder())
        .map(|(b, q)| f32::from(*b as i8) * q)
        .sum();
    for (b, q) in cb.zip(cq) {
        for i in 0..8 {
            lanes[i] += f32::from(b[i] as i8) * q[i];
        }
    }
    Some((lanes.iter().sum::<f32>() + tail) * f32::from_le_bytes(*scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` unit vectors of `dims` around `clusters` random centres (noise ≈ 0.6 of the
    /// centre's size, so a neighbourhood often spans clusters and lists).
    fn clustered(n: usize, dims: usize, clusters: usize, seed: u64) -> Vec<f32> {
        let mut mix = Mix(seed);
        let mut gauss = move || (0..6).map(|_| mix.below(1000) as f32 / 1000.0).sum::<f32>() - 3.0;
        let centres: Vec<f32> = (0..clusters * dims).map(|_| gauss()).collect();
        let mut out = Vec::with_capacity(n * dims);
        for i in 0..n {
            let c = &centres[(i % clusters) * dims..(i % clusters + 1) * dims];
            let v: Vec<f32> = c.iter().map(|x| x + 0.6 * gauss()).collect();
            out.extend(normalised(v));
        }
        out
    }

    #[test]
    fn codes_approximate_the_dot_product() {
        let v = normalised(vec![0.3, -1.0, 0.25, 0.0, 2.0, -0.7, 0.1, 0.9, 1.1]);
        let q = normalised(vec![1.0, 0.5, -0.25, 0.3, 1.0, 0.2, -0.1, 0.0, 0.4]);
        let exact = dot(&v, &q);
        let approx = approx_dot(&quantise(&v), &q).unwrap();
        assert!((exact - approx).abs() < 0.01, "{exact} vs {approx}");
        assert!(approx_dot(&quantise(&v), &q[..4]).is_none());
        assert_eq!(lists_for(100_000), 316);
        assert_eq!(probes_for(316), 64);
        assert_eq!(probes_for(4), 4);
    }

    /// An index over `data` as the store builds it: lists, each vector's list and code.
    struct Built {
        centroids: Vec<f32>,
        lists: usize,
        by_list: Vec<Vec<usize>>,
        member_of: Vec<usize>,
        codes: Vec<Vec<u8>>,
    }

    fn build(data: &[f32], dims: usize) -> Built {
        let n = data.len() / dims;
        let lists = lists_for(n);
        let stride = sample_stride(n, lists);
        let sample: Vec<f32> = data
            .chunks_exact(dims)
            .step_by(stride)
            .flatten()
            .copied()
            .collect();
        let centroids = train(&sample, dims, lists);
        let mut by_list: Vec<Vec<usize>> = vec![Vec::new(); lists];
        let mut member_of = Vec::with_capacity(n);
        for (i, v) in data.chunks_exact(dims).enumerate() {
            let list = assign(&centroids, dims, v);
            by_list[list].push(i);
            member_of.push(list);
        }
        let codes = data.chunks_exact(dims).map(quantise).collect();
        Built {
            centroids,
            lists,
            by_list,
            member_of,
            codes,
        }
    }

    /// Mean recall@10 of `queries` reading `probes` lists, re-ranking the best 100 exactly
    /// as the store does.
    fn recall(data: &[f32], dims: usize, index: &Built, queries: &[f32], probes: usize) -> f64 {
        let mut recall = 0.0;
        for q in queries.chunks_exact(dims) {
            let mut exact: Vec<(usize, f32)> = data
                .chunks_exact(dims)
                .map(|v| dot(v, q))
                .enumerate()
                .collect();
            exact.sort_by(|a, b| b.1.total_cmp(&a.1));
            let mut found: Vec<(usize, f32)> = nearest(&index.centroids, dims, q, probes)
                .into_iter()
                .flat_map(|l| index.by_list[l].iter().copied())
                .map(|i| (i, approx_dot(&index.codes[i], q).unwrap()))
                .collect();
            found.sort_by(|a, b| b.1.total_cmp(&a.1));
            let mut top: Vec<(usize, f32)> = found
                .iter()
                .take(100)
                .map(|(i, _)| (*i, dot(&data[i * dims..(i + 1) * dims], q)))
                .collect();
            top.sort_by(|a, b| b.1.total_cmp(&a.1));
            let truth: Vec<usize> = exact.iter().take(10).map(|(i, _)| *i).collect();
            recall += top
                .iter()
                .take(10)
                .filter(|(i, _)| truth.contains(i))
                .count() as f64
                / 10.0;
        }
        recall / (queries.len() / dims) as f64
    }

    /// The fallback probe count meets the recall target (≥ 0.95 of the exact top 10) on
    /// 20,000 clustered vectors whose neighbourhoods span lists.
    #[test]
    fn recall_at_10_against_exact_search() {
        let (n, dims) = (20_000, 32);
        // The last 100 are the queries: from the data's distribution, not in the data.
        let mut data = clustered(n + 100, dims, 400, 7);
        let queries = data.split_off(n * dims);
        let index = build(&data, dims);
        let recall = recall(&data, dims, &index, &queries, probes_for(index.lists));
        assert!(recall >= 0.95, "recall@10 = {recall}");
    }

    /// Calibrated on stored vectors, the probe count keeps recall@10 ≥ 0.95 for queries
    /// that are not stored, on hard data (neighbourhoods spanning lists) and on easy data
    /// (tight topics), and reads far fewer lists on the easy data.
    #[test]
    fn calibrated_probes_keep_recall_on_held_out_queries() {
        let dims = 32;
        let mut probes_seen = Vec::new();
        for (n, clusters, spread) in [(20_000, 400, 0.6_f32), (20_000, 20, 0.25)] {
            let mut mix = Mix(11);
            let mut gauss =
                move || (0..6).map(|_| mix.below(1000) as f32 / 1000.0).sum::<f32>() - 3.0;
            let centres: Vec<f32> = (0..clusters * dims).map(|_| gauss()).collect();
            let mut data = Vec::with_capacity((n + 100) * dims);
            for i in 0..n + 100 {
                let c = &centres[(i * 7 % clusters) * dims..(i * 7 % clusters + 1) * dims];
                let v: Vec<f32> = c.iter().map(|x| x + spread * gauss()).collect();
                data.extend(normalised(v));
            }
            let queries = data.split_off(n * dims);
            let index = build(&data, dims);
            let step = n / CALIBRATION_QUERIES;
            let mut calibration = Calibration::new(
                dims,
                (0..CALIBRATION_QUERIES)
                    .map(|q| {
                        let i = q * step;
                        (i.to_string(), data[i * dims..(i + 1) * dims].to_vec())
                    })
                    .collect(),
            );
            for (i, v) in data.chunks_exact(dims).enumerate() {
                calibration.observe(&i.to_string(), v, index.member_of[i]);
            }
            let probes = calibration.probes(&index.centroids, index.lists).unwrap();
            let recall = recall(&data, dims, &index, &queries, probes);
            assert!(
                recall >= 0.95,
                "{clusters} clusters: recall@10 = {recall} with {probes} of {} lists",
                index.lists
            );
            probes_seen.push((probes, index.lists));
        }
        let (easy, lists) = probes_seen[1];
        assert!(
            easy * 4 <= lists,
            "easy data should read at most a quarter of the lists: {probes_seen:?}"
        );
        assert!(Calibration::default().probes(&[], 0).is_none());
    }
}
