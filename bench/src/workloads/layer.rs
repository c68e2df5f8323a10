//! LAYER: what lock-tower's `LockLayer` costs per request over the same
//! lock taken by hand, over loopback HTTP.
//!
//! One axum server on 127.0.0.1:0 in this process, three routes doing the
//! same trivial work (answer "ok"):
//!
//! - `/layer/{n}` behind `LockLayer::new(client, key fn)`, key `layer:{n}`;
//! - `/hand/{n}`: the handler takes the same lock itself
//!   (`lock_core::in_context`, `acquire_with` waiting at most
//!   `lock_tower::DEFAULT_WAIT`, the guard dropped at the end — what the
//!   layer does, written out);
//! - `/bare/{n}`: no lock, the HTTP floor.
//!
//! `--tasks` client tasks drive them with one keep-alive hyper client, one
//! request at a time each. The variants alternate in short time slices
//! (every task sends the variant of the current slice), so drift and
//! background work hit them alike. Task t uses the names n ≡ t (mod
//! tasks), rotating over [`NAMES_PER_TASK`] of them: no two requests ever
//! contend for a lock. Figures per variant: requests/s over the time of its
//! slices, p50/p99 request latency (send → body collected).

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request};
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use lock_core::{AcquireOptions, LockClient};
use lock_tower::LockLayer;
use tokio::task::JoinSet;

use super::{lock_client, Ctx, MAX_CYCLES};
use crate::report::Measurement;
use crate::stats::{mono_ns, percentile, Window};
use crate::BenchResult;

/// Lock names each client task rotates over (a name comes back only after
/// this many requests of the task, long after its lock was released).
pub(crate) const NAMES_PER_TASK: usize = 64;
/// Longest slice of one variant.
const MAX_SLICE: Duration = Duration::from_millis(200);
/// At least this many slices in the measured window, so every variant gets
/// at least two of them even in a smoke run.
const MIN_SLICES: u32 = 6;

/// The variants, in slice order: (lib of the JSON line, route).
pub(crate) const VARIANTS: [(&str, &str); 3] = [
    ("lock-tower", "layer"),
    ("by-hand", "hand"),
    ("bare", "bare"),
];

fn key(n: usize) -> String {
    format!("layer:{n}")
}

/// The request numbers' key, from the last path segment (`/layer/{n}`).
fn key_from_path(req: &Request<Body>) -> Option<String> {
    let last = req.uri().path().rsplit('/').next()?;
    last.parse::<usize>().ok().map(key)
}

/// The `/hand/{n}` handler: the lock the layer would take, taken by hand.
async fn by_hand(client: LockClient, n: usize) -> (StatusCode, &'static str) {
    let locked = lock_core::in_context(async {
        let lock = client.lock(key(n))?;
        let guard = lock
            .acquire_with(AcquireOptions::new().wait(lock_tower::DEFAULT_WAIT))
            .await?;
        let out = "ok";
        drop(guard);
        Ok::<_, lock_core::Error>(out)
    })
    .await;
    match locked {
        Ok(out) => (StatusCode::OK, out),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "lock"),
    }
}

fn app(client: LockClient) -> Router {
    let hand_client = client.clone();
    Router::new()
        .route("/bare/{n}", get(|| async { "ok" }))
        .route(
            "/hand/{n}",
            get(move |Path(n): Path<usize>| by_hand(hand_client.clone(), n)),
        )
        .merge(
            Router::new()
                .route("/layer/{n}", get(|| async { "ok" }))
                .layer(LockLayer::new(client, key_from_path)),
        )
}

/// The time-slice schedule: slice k (counted from the window's start) runs
/// variant k mod 3.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slices {
    start: u64,
    slice_ns: u64,
}

impl Slices {
    pub(crate) fn new(window: &Window) -> Self {
        let measured = Duration::from_nanos(window.to - window.from);
        let slice = MAX_SLICE
            .min(measured / MIN_SLICES)
            .max(Duration::from_millis(1));
        Slices {
            start: window.start,
            slice_ns: slice.as_nanos() as u64,
        }
    }

    /// The variant whose slice holds the instant `t`.
    pub(crate) fn variant_at(&self, t: u64) -> usize {
        (t.saturating_sub(self.start) / self.slice_ns % VARIANTS.len() as u64) as usize
    }

    /// Seconds of the measured window that belong to each variant.
    pub(crate) fn secs_per_variant(&self, window: &Window) -> [f64; 3] {
        let mut ns = [0u64; 3];
        let mut k = window.from.saturating_sub(self.start) / self.slice_ns;
        loop {
            let from = self.start + k * self.slice_ns;
            if from >= window.to {
                break;
            }
            let to = from + self.slice_ns;
            let overlap = to.min(window.to).saturating_sub(from.max(window.from));
            ns[(k % VARIANTS.len() as u64) as usize] += overlap;
            k += 1;
        }
        ns.map(|n| n as f64 / 1e9)
    }

    fn slice_ms(&self) -> f64 {
        self.slice_ns as f64 / 1e6
    }
}

/// What one client task saw: latencies (ns) of measured requests per
/// variant, and the number of answers that were not 200.
#[derive(Default)]
struct TaskFigures {
    latencies: [Vec<u64>; 3],
    not_ok: [u64; 3],
}

pub(crate) async fn run(ctx: &Ctx) -> BenchResult<Vec<Measurement>> {
    let client = lock_client(&ctx.url, &ctx.prefix, None).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, app(client)).await });
    let http: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();

    let tasks = ctx.opts.tasks;
    let window = ctx.window();
    let slices = Slices::new(&window);
    let mut set: JoinSet<BenchResult<TaskFigures>> = JoinSet::new();
    for t in 0..tasks {
        let http = http.clone();
        set.spawn(async move {
            let mut figures = TaskFigures::default();
            for i in 0..MAX_CYCLES {
                let start = mono_ns();
                if start >= window.to {
                    break;
                }
                let v = slices.variant_at(start);
                let n = t + tasks * (i % NAMES_PER_TASK);
                let uri = format!("http://{addr}/{}/{n}", VARIANTS[v].1).parse()?;
                let res = http.get(uri).await?;
                let status = res.status();
                res.into_body().collect().await?;
                let end = mono_ns();
                if window.contains(end) {
                    figures.latencies[v].push(end - start);
                    if status != StatusCode::OK {
                        figures.not_ok[v] += 1;
                    }
                }
            }
            Ok(figures)
        });
    }
    let mut latencies: [Vec<u64>; 3] = Default::default();
    let mut not_ok = [0u64; 3];
    let mut failed = None;
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(Ok(f)) => {
                for v in 0..VARIANTS.len() {
                    latencies[v].extend_from_slice(&f.latencies[v]);
                    not_ok[v] += f.not_ok[v];
                }
            }
            Ok(Err(e)) => failed = Some(e),
            Err(e) => failed = Some(e.into()),
        }
    }
    server.abort();
    if let Some(e) = failed {
        return Err(e);
    }

    let secs = slices.secs_per_variant(&window);
    Ok(VARIANTS
        .iter()
        .enumerate()
        .map(|(v, (lib, route))| {
            let lat = &mut latencies[v];
            lat.sort_unstable();
            let us = |p| percentile(lat, p).map(|ns| ns as f64 / 1000.0);
            Measurement {
                lib: (*lib).into(),
                workload: "LAYER".into(),
                cycles_per_s: (secs[v] > 0.0).then(|| lat.len() as f64 / secs[v]),
                p50_us: us(50.0),
                p99_us: us(99.0),
                counter_ok: Some(not_ok[v] == 0 && !lat.is_empty()),
                notes: format!(
                    "GET /{route}/{{n}} over loopback HTTP (axum server and keep-alive hyper client in this process), {tasks} client tasks, one request at a time each; variants alternate in {:.0} ms slices, {:.2} s of the window each; keys layer:{{n}}, {NAMES_PER_TASK} per task, never contended; cycles_per_s = requests/s, p50/p99 = request latency (send -> body collected); measured requests {}, not 200: {}",
                    slices.slice_ms(),
                    secs[v],
                    lat.len(),
                    not_ok[v]
                ),
                ..Default::default()
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_share_the_window_fairly_and_name_the_variant() {
        let ms = 1_000_000;
        // warm-up 0..200 ms, window 200..700 ms: slices of 500/6 ms.
        let w = Window {
            start: 0,
            from: 200 * ms,
            to: 700 * ms,
        };
        let s = Slices::new(&w);
        assert_eq!(s.variant_at(0), 0);
        assert_eq!(s.variant_at(s.slice_ns), 1);
        assert_eq!(s.variant_at(2 * s.slice_ns + 1), 2);
        assert_eq!(s.variant_at(3 * s.slice_ns), 0);
        let secs = s.secs_per_variant(&w);
        let total: f64 = secs.iter().sum();
        assert!((total - 0.5).abs() < 1e-6, "{secs:?}");
        for x in secs {
            assert!(x >= 2.0 * s.slice_ns as f64 / 1e9 - 1e-3, "{secs:?}");
        }
        // A long window: 200 ms slices.
        let long = Window {
            start: 0,
            from: 1000 * ms,
            to: 6000 * ms,
        };
        assert_eq!(Slices::new(&long).slice_ns, 200 * ms);
    }
}
