//! What this host offers to jobs: CPUs, memory and NVIDIA GPUs (from `nvidia-smi`), each
//! overridable by the agent's flags.

use std::process::Stdio;
use std::time::Duration;

use mission_api::Resources;
use mission_api::lz::Gpu;

/// Overrides of detected resources (`mission lz --cpus/--memory/--gpus`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Overrides {
    /// CPUs to offer.
    pub cpus: Option<u32>,
    /// Memory to offer, in megabytes.
    pub memory_mb: Option<u64>,
    /// GPUs to offer (the first of those detected, or indices 0.. when fewer were found).
    pub gpus: Option<u32>,
}

/// Detects this host's resources and applies `overrides`.
pub async fn detect(overrides: Overrides) -> (Resources, Vec<Gpu>) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let memory_mb = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| parse_mem_total(&s)).unwrap_or(1024);
    let mut gpus = nvidia_gpus().await;
    if let Some(n) = overrides.gpus {
        if gpus.len() >= n as usize {
            gpus.truncate(n as usize);
        } else {
            gpus = (0..n)
                .map(|index| Gpu { index, name: "GPU (declared)".into(), memory_amount: 0, uuid: String::new() })
                .collect();
        }
    }
    let resources = Resources {
        cpu_count: overrides.cpus.unwrap_or(cpus),
        memory_amount: overrides.memory_mb.unwrap_or(memory_mb),
        gpu_count: gpus.len() as u32,
    };
    (resources, gpus)
}

fn parse_mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

/// The GPUs `nvidia-smi` lists; none when it is absent or fails.
async fn nvidia_gpus() -> Vec<Gpu> {
    let run = tokio::process::Command::new("nvidia-smi")
        .args(["--query-gpu=index,name,memory.total,uuid", "--format=csv,noheader,nounits"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(Duration::from_secs(20), run).await {
        Ok(Ok(out)) if out.status.success() => parse_nvidia_smi(&String::from_utf8_lossy(&out.stdout)),
        Ok(Ok(out)) => {
            tracing::warn!("nvidia-smi failed ({}); offering no GPUs", out.status);
            Vec::new()
        }
        Ok(Err(_)) => Vec::new(), // not installed
        Err(_) => {
            tracing::warn!("nvidia-smi did not answer within 20 s; offering no GPUs");
            Vec::new()
        }
    }
}

/// Parses `nvidia-smi --query-gpu=index,name,memory.total,uuid --format=csv,noheader,nounits`.
pub fn parse_nvidia_smi(out: &str) -> Vec<Gpu> {
    out.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            let [index, name, memory, uuid] = fields[..] else { return None };
            Some(Gpu {
                index: index.parse().ok()?,
                name: name.to_owned(),
                memory_amount: memory.parse().unwrap_or(0),
                uuid: uuid.to_owned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_h100_fixture() {
        let out = include_str!("../../../fixtures/nvidia-smi/h100-query-noheader.csv");
        let gpus = parse_nvidia_smi(out);
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].index, 0);
        assert_eq!(gpus[0].name, "NVIDIA H100 80GB HBM3");
        assert_eq!(gpus[0].memory_amount, 81559);
        assert_eq!(gpus[0].uuid, "GPU-be8bed35-e65b-5620-b294-1ebdc96f6218");
    }

    #[test]
    fn reads_meminfo() {
        assert_eq!(parse_mem_total("MemTotal:       24576000 kB\nMemFree: 1 kB\n"), Some(24000));
    }
}
