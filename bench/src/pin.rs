//! CPU pinning through `sched_setaffinity` (nix's safe wrapper), the same
//! system call `taskset` makes.
//!
//! - The benchmark pins itself before it starts its runtime: every thread
//!   created afterwards, and every W3 child process, inherits the mask
//!   (like `taskset -c M lock-bench ...`).
//! - The private redis-server is pinned right after it answers, on every
//!   one of its threads (`/proc/<pid>/task/*`), like `taskset -a -p -c N <pid>`.

use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;

use crate::BenchResult;

fn cpu_set(cpu: usize) -> BenchResult<CpuSet> {
    let mut set = CpuSet::new();
    set.set(cpu)
        .map_err(|e| format!("CPU {cpu} cannot be put in a CPU set: {e}"))?;
    Ok(set)
}

/// Pins the calling thread, and so every thread and process it starts later, to `cpu`.
pub(crate) fn pin_self(cpu: usize) -> BenchResult<()> {
    sched_setaffinity(Pid::from_raw(0), &cpu_set(cpu)?)
        .map_err(|e| format!("cannot pin the benchmark to CPU {cpu}: {e}"))?;
    Ok(())
}

/// Pins every thread of process `pid` to `cpu`; returns how many threads.
pub(crate) fn pin_process(pid: u32, cpu: usize) -> BenchResult<usize> {
    let set = cpu_set(cpu)?;
    let mut pinned = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let tid: i32 = match entry?.file_name().to_str().and_then(|s| s.parse().ok()) {
            Some(t) => t,
            None => continue,
        };
        sched_setaffinity(Pid::from_raw(tid), &set)
            .map_err(|e| format!("cannot pin thread {tid} of process {pid} to CPU {cpu}: {e}"))?;
        pinned += 1;
    }
    if pinned == 0 {
        return Err(format!("process {pid} has no threads to pin").into());
    }
    Ok(pinned)
}
