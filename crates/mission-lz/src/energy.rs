//! What a job's hardware drew, where the hardware tells: the parts of its energy a landing zone
//! measures ([`mission_api::EnergyParts`]); the server models the rest by the station's settings.
//!
//! - **GPUs**: NVIDIA's management library (NVML, `libnvidia-ml.so.1`, loaded at run time so that
//!   hosts without a driver need nothing) gives each device's total energy in mJ since the driver
//!   loaded: read as the job starts and ends, for the GPUs it holds (a landing zone hands each GPU
//!   to one job at a time). Where a device has no counter (before Volta), its power is sampled
//!   every 100 ms and integrated; where NVML cannot be loaded but `nvidia-smi` answers, its
//!   `power.draw` is sampled every second.
//! - **Processors and memory**: RAPL's counters in `/sys/class/powercap` (`package-N` for the
//!   processors, `dram` for memory where the platform has it), as the host's energy over the job's
//!   run times the job's share of the CPU time the whole host used then (`/proc/stat`). The
//!   counters wrap (at `max_energy_range_uj`, minutes at full power), so they are read every
//!   [`RAPL_TICK`] into totals that do not. They are readable by root only (since Linux 5.10): an
//!   agent run as another user models these parts.
//!
//! `MISSION_NVML_LIBRARY` names another NVML (a path), `MISSION_POWERCAP_DIR` another powercap
//! tree: tests use both with fakes.

use std::ffi::{CString, c_int, c_uint, c_ulonglong, c_void};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mission_api::{EnergyPart, EnergyParts, EnergySource};
use tokio::sync::oneshot;

/// How often RAPL's counters are read, so that none wraps unseen: at 400 W a 32-bit µJ range
/// lasts about 3 minutes, the 262 kJ range Intel's packages have about 11.
const RAPL_TICK: Duration = Duration::from_secs(30);

/// How often a GPU's power is sampled through NVML where it has no energy counter.
const NVML_SAMPLE: Duration = Duration::from_millis(100);

/// How often `nvidia-smi` is asked for the power where NVML cannot be loaded.
const SMI_SAMPLE: Duration = Duration::from_secs(1);

/// A landing zone's energy meters: what it found at its start.
pub(crate) struct Meters {
    nvml: Option<Arc<Nvml>>,
    /// `nvidia-smi` listed the host's GPUs (their power can be asked of it).
    smi: bool,
    rapl: Option<Arc<Rapl>>,
}

impl Meters {
    /// Finds the meters of a host whose GPUs `nvidia-smi` listed (`gpus`); RAPL's counters are
    /// read every [`RAPL_TICK`] from then on (in a task of the caller's runtime).
    pub fn detect(gpus: bool) -> Self {
        let nvml = gpus.then(|| {
            let library = std::env::var_os("MISSION_NVML_LIBRARY").unwrap_or_else(|| "libnvidia-ml.so.1".into());
            Nvml::load(Path::new(&library))
                .map_err(|why| tracing::info!("GPU energy is sampled with nvidia-smi or modelled: {why}"))
                .ok()
                .map(Arc::new)
        });
        let powercap =
            std::env::var_os("MISSION_POWERCAP_DIR").map_or_else(|| "/sys/class/powercap".into(), PathBuf::from);
        let rapl = Rapl::detect(&powercap).map(Arc::new);
        if let Some(rapl) = &rapl {
            let rapl = Arc::downgrade(rapl);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(RAPL_TICK);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let Some(rapl) = rapl.upgrade() else { break };
                    tokio::task::spawn_blocking(move || rapl.totals()).await.ok();
                }
            });
        }
        Self { nvml: nvml.flatten(), smi: gpus, rapl }
    }

    /// What is measured, for the agent's log.
    pub fn describe(&self) -> String {
        let gpus = match (&self.nvml, self.smi) {
            (Some(_), _) => "GPUs by NVML",
            (None, true) => "GPUs by nvidia-smi's power samples",
            (None, false) => "no GPUs",
        };
        let cpus = match &self.rapl {
            Some(rapl) if rapl.has_dram() => "processors and memory by RAPL",
            Some(_) => "processors by RAPL",
            None => "no RAPL",
        };
        format!("{gpus}, {cpus}")
    }

    /// Starts measuring a job that holds the GPUs `gpu_indices` (blocking: reads counters).
    pub fn start(&self, gpu_indices: &[u32]) -> JobMeter {
        let gpu = if gpu_indices.is_empty() {
            None
        } else {
            let indices = gpu_indices.to_vec();
            let counters = self.nvml.as_ref().and_then(|nvml| {
                let start: Option<Vec<u64>> = indices.iter().map(|&i| nvml.energy_mj(i)).collect();
                start.map(|start| GpuMeter::Counters { nvml: nvml.clone(), indices: indices.clone(), start })
            });
            counters.or_else(|| {
                let power = match &self.nvml {
                    Some(nvml) => PowerSource::Nvml(nvml.clone(), indices),
                    None if self.smi => PowerSource::Smi(indices),
                    None => return None,
                };
                Some(GpuMeter::sampled(power))
            })
        };
        let rapl = self.rapl.as_ref().and_then(|rapl| Some((rapl.clone(), rapl.totals()?)));
        JobMeter { gpu, rapl }
    }
}

/// The measuring of one job, from its start.
pub(crate) struct JobMeter {
    gpu: Option<GpuMeter>,
    rapl: Option<(Arc<Rapl>, RaplTotals)>,
}

impl JobMeter {
    /// What was measured of a job that used `cpu_seconds` of CPU (where known), as it ends.
    pub async fn finish(self, cpu_seconds: Option<f64>) -> Option<EnergyParts> {
        let gpu = match self.gpu {
            Some(meter) => meter.finish().await,
            None => None,
        };
        let (cpu, memory) = match (self.rapl, cpu_seconds) {
            (Some((rapl, start)), Some(cpu_seconds)) => {
                let end = tokio::task::spawn_blocking(move || rapl.totals()).await.ok().flatten();
                end.map_or((None, None), |end| start.share(&end, cpu_seconds))
            }
            _ => (None, None),
        };
        let parts = EnergyParts { cpu, memory, gpu };
        (parts != EnergyParts::default()).then_some(parts)
    }
}

enum GpuMeter {
    /// The devices' energy counters at the start, in mJ.
    Counters { nvml: Arc<Nvml>, indices: Vec<u32>, start: Vec<u64> },
    /// A sampler integrating the power; answers joules when told to stop.
    Sampled { stop: oneshot::Sender<()>, joules: tokio::task::JoinHandle<Option<f64>> },
}

impl GpuMeter {
    fn sampled(power: PowerSource) -> Self {
        let (stop, mut stopped) = oneshot::channel();
        let joules = tokio::spawn(async move {
            let mut tick = tokio::time::interval(power.period());
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut joules = 0.0;
            let mut last: Option<(tokio::time::Instant, f64)> = None;
            loop {
                let done = tokio::select! {
                    _ = tick.tick() => false,
                    _ = &mut stopped => true,
                };
                let now = tokio::time::Instant::now();
                if let Some(watts) = power.watts().await {
                    // Trapezoids between samples.
                    if let Some((at, before)) = last {
                        joules += (now - at).as_secs_f64() * (before + watts) / 2.0;
                    }
                    last = Some((now, watts));
                }
                if done {
                    break;
                }
            }
            last.map(|_| joules)
        });
        Self::Sampled { stop, joules }
    }

    async fn finish(self) -> Option<EnergyPart> {
        match self {
            Self::Counters { nvml, indices, start } => {
                let end = tokio::task::spawn_blocking(move || {
                    let end: Option<Vec<u64>> = indices.iter().map(|&i| nvml.energy_mj(i)).collect();
                    end
                })
                .await
                .ok()
                .flatten()?;
                let mj: u64 = start.iter().zip(&end).map(|(a, b)| b.saturating_sub(*a)).sum();
                Some(EnergyPart { wh: mj as f64 / 3.6e6, source: EnergySource::GpuCounter })
            }
            Self::Sampled { stop, joules } => {
                let _ = stop.send(());
                let joules = joules.await.ok().flatten()?;
                Some(EnergyPart { wh: joules / 3600.0, source: EnergySource::GpuPowerSamples })
            }
        }
    }
}

/// Where a sampler reads the power of a job's GPUs.
enum PowerSource {
    Nvml(Arc<Nvml>, Vec<u32>),
    Smi(Vec<u32>),
}

impl PowerSource {
    fn period(&self) -> Duration {
        match self {
            Self::Nvml(..) => NVML_SAMPLE,
            Self::Smi(_) => SMI_SAMPLE,
        }
    }

    /// The devices' power together, in watts; none when any cannot be read.
    async fn watts(&self) -> Option<f64> {
        match self {
            Self::Nvml(nvml, indices) => {
                indices.iter().map(|&i| nvml.power_mw(i).map(|mw| f64::from(mw) / 1000.0)).sum()
            }
            Self::Smi(indices) => {
                let ids: Vec<String> = indices.iter().map(u32::to_string).collect();
                let out = tokio::process::Command::new("nvidia-smi")
                    .args(["--query-gpu=power.draw", "--format=csv,noheader,nounits", "-i", &ids.join(",")])
                    .kill_on_drop(true)
                    .output();
                let out = tokio::time::timeout(Duration::from_secs(5), out).await.ok()?.ok()?;
                let text = String::from_utf8_lossy(&out.stdout);
                let watts: Option<Vec<f64>> = text.lines().map(|line| line.trim().parse().ok()).collect();
                watts.filter(|w| out.status.success() && w.len() == indices.len()).map(|w| w.iter().sum())
            }
        }
    }
}

/// `nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *)`.
type HandleByIndex = unsafe extern "C" fn(c_uint, *mut *mut c_void) -> c_int;
/// `nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t, unsigned long long *)`.
type TotalEnergy = unsafe extern "C" fn(*mut c_void, *mut c_ulonglong) -> c_int;
/// `nvmlDeviceGetPowerUsage(nvmlDevice_t, unsigned int *)`.
type PowerUsage = unsafe extern "C" fn(*mut c_void, *mut c_uint) -> c_int;

/// NVIDIA's management library, loaded at run time, with the three calls the meters make.
struct Nvml {
    handle_by_index: HandleByIndex,
    total_energy: TotalEnergy,
    power_usage: PowerUsage,
}

/// NVML's `NVML_SUCCESS`.
const NVML_SUCCESS: c_int = 0;

// The library is loaded once and never unloaded, and NVML is thread-safe (its documentation:
// "all NVML functions are thread-safe"), so its functions may be called from any thread.
impl Nvml {
    /// Loads and initialises the library at `path` (a name the loader searches for, or a path).
    #[allow(unsafe_code)]
    fn load(path: &Path) -> Result<Self, String> {
        use std::os::unix::ffi::OsStrExt;
        let name = CString::new(path.as_os_str().as_bytes()).map_err(|_| "a NUL in the library's name".to_owned())?;
        // SAFETY: dlopen takes a NUL-terminated name; the handle is never closed, so the symbols
        // taken from it stay valid for the life of the process.
        let lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            return Err(format!("{} could not be loaded: {}", path.display(), dl_error()));
        }
        let symbol = |name: &str| {
            let c_name = CString::new(name).expect("no NUL");
            // SAFETY: `lib` is a live handle and the name NUL-terminated.
            let f = unsafe { libc::dlsym(lib, c_name.as_ptr()) };
            if f.is_null() { Err(format!("{} has no {name}", path.display())) } else { Ok(f) }
        };
        let init = symbol("nvmlInit_v2")?;
        // SAFETY: the signatures are NVML's (nvml.h): nvmlInit_v2(void) and the three of the
        // types above; nvmlDevice_t is a pointer.
        let nvml = unsafe {
            let init = std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(init);
            let status = init();
            if status != NVML_SUCCESS {
                return Err(format!("nvmlInit_v2 answered {status}"));
            }
            Self {
                handle_by_index: std::mem::transmute::<*mut c_void, HandleByIndex>(symbol(
                    "nvmlDeviceGetHandleByIndex_v2",
                )?),
                total_energy: std::mem::transmute::<*mut c_void, TotalEnergy>(symbol(
                    "nvmlDeviceGetTotalEnergyConsumption",
                )?),
                power_usage: std::mem::transmute::<*mut c_void, PowerUsage>(symbol("nvmlDeviceGetPowerUsage")?),
            }
        };
        Ok(nvml)
    }

    #[allow(unsafe_code)]
    fn device(&self, index: u32) -> Option<*mut c_void> {
        let mut device = std::ptr::null_mut();
        // SAFETY: NVML writes a handle through the pointer it is given.
        let status = unsafe { (self.handle_by_index)(index, &mut device) };
        (status == NVML_SUCCESS).then_some(device)
    }

    /// The device's energy since the driver loaded, in mJ; none where it keeps no counter.
    #[allow(unsafe_code)]
    fn energy_mj(&self, index: u32) -> Option<u64> {
        let device = self.device(index)?;
        let mut mj: c_ulonglong = 0;
        // SAFETY: a handle NVML gave, and a pointer to write the figure through.
        let status = unsafe { (self.total_energy)(device, &mut mj) };
        (status == NVML_SUCCESS).then_some(mj)
    }

    /// The device's power now, in mW.
    #[allow(unsafe_code)]
    fn power_mw(&self, index: u32) -> Option<u32> {
        let device = self.device(index)?;
        let mut mw: c_uint = 0;
        // SAFETY: as for `energy_mj`.
        let status = unsafe { (self.power_usage)(device, &mut mw) };
        (status == NVML_SUCCESS).then_some(mw)
    }
}

#[allow(unsafe_code)]
fn dl_error() -> String {
    // SAFETY: dlerror answers null or a NUL-terminated message, valid until the next dl call.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        return "unknown error".into();
    }
    // SAFETY: as above.
    unsafe { std::ffi::CStr::from_ptr(message) }.to_string_lossy().into_owned()
}

/// RAPL's counters: the processor packages', and the memory's where the platform has them.
struct Rapl {
    packages: Vec<Domain>,
    dram: Vec<Domain>,
    /// The totals so far, and each counter's last reading.
    state: Mutex<RaplState>,
}

struct Domain {
    energy_uj: PathBuf,
    /// Where the counter wraps to 0.
    range_uj: u64,
}

#[derive(Default)]
struct RaplState {
    last: Vec<u64>,
    totals: RaplTotals,
}

/// Energy since the agent started, in µJ, and the CPU time the host used in that time, in s.
#[derive(Debug, Clone, Default, PartialEq)]
struct RaplTotals {
    packages_uj: u64,
    dram_uj: u64,
    host_cpu_seconds: f64,
}

impl RaplTotals {
    /// The parts of a job that used `cpu_seconds` from `self` to `end`: the host's energy over
    /// that time times the job's share of the CPU time the host used.
    fn share(&self, end: &Self, cpu_seconds: f64) -> (Option<EnergyPart>, Option<EnergyPart>) {
        let host = end.host_cpu_seconds - self.host_cpu_seconds;
        if host <= 0.0 || !cpu_seconds.is_finite() {
            return (None, None);
        }
        let share = (cpu_seconds / host).clamp(0.0, 1.0);
        let part = |uj: u64| EnergyPart { wh: uj as f64 / 3.6e9 * share, source: EnergySource::Rapl };
        let dram = end.dram_uj - self.dram_uj;
        (Some(part(end.packages_uj - self.packages_uj)), (dram > 0).then(|| part(dram)))
    }
}

impl Rapl {
    /// The packages and DRAM domains under `powercap` whose counters can be read; none when none.
    fn detect(powercap: &Path) -> Option<Self> {
        let (mut packages, mut dram) = (Vec::new(), Vec::new());
        let mut entries: Vec<PathBuf> = std::fs::read_dir(powercap).ok()?.flatten().map(|e| e.path()).collect();
        entries.sort();
        for dir in entries {
            let zone = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            // intel-rapl:N are packages and intel-rapl:N:M their parts (AMD's are named so too);
            // `intel-rapl` itself is the control type, and intel-rapl-mmio repeats the packages.
            if !zone.starts_with("intel-rapl:") {
                continue;
            }
            let name = std::fs::read_to_string(dir.join("name")).unwrap_or_default();
            let list = match name.trim() {
                n if n.starts_with("package-") => &mut packages,
                "dram" => &mut dram,
                _ => continue,
            };
            let range_uj = read_u64(&dir.join("max_energy_range_uj"));
            let energy_uj = dir.join("energy_uj");
            if let (Some(range_uj), Some(_)) = (range_uj, read_u64(&energy_uj)) {
                list.push(Domain { energy_uj, range_uj });
            } else {
                tracing::debug!("RAPL zone {zone} cannot be read");
            }
        }
        if packages.is_empty() {
            return None;
        }
        let rapl = Self { packages, dram, state: Mutex::new(RaplState::default()) };
        rapl.totals()?;
        Some(rapl)
    }

    fn has_dram(&self) -> bool {
        !self.dram.is_empty()
    }

    /// Reads every counter and answers the totals so far (blocking: reads sysfs).
    fn totals(&self) -> Option<RaplTotals> {
        let now: Option<Vec<u64>> = self.packages.iter().chain(&self.dram).map(|d| read_u64(&d.energy_uj)).collect();
        let now = now?;
        let host_cpu_seconds = host_cpu_seconds()?;
        let mut state = self.state.lock().expect("not poisoned");
        if state.last.len() == now.len() {
            let domains = self.packages.iter().chain(&self.dram);
            for (k, ((domain, &before), &after)) in domains.zip(&state.last.clone()).zip(&now).enumerate() {
                let delta = if after >= before { after - before } else { domain.range_uj - before + after };
                if k < self.packages.len() {
                    state.totals.packages_uj += delta;
                } else {
                    state.totals.dram_uj += delta;
                }
            }
        }
        state.last = now;
        state.totals.host_cpu_seconds = host_cpu_seconds;
        Some(state.totals.clone())
    }
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The CPU time the host has used since it booted, in seconds: `/proc/stat`'s busy columns (user,
/// nice, system, irq, softirq; not idle, iowait or steal) over the kernel's clock ticks.
fn host_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    host_busy_ticks(&stat).map(|ticks| ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
}

fn host_busy_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let columns: Vec<u64> = line.split_whitespace().skip(1).map(|c| c.parse().ok()).collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal …
    let busy = [0, 1, 2, 5, 6].iter().map(|&i| columns.get(i).copied().unwrap_or(0)).sum();
    Some(busy)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(root: &Path, zone: &str, name: &str, energy: u64, range: u64) {
        let dir = root.join(zone);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("name"), format!("{name}\n")).unwrap();
        std::fs::write(dir.join("energy_uj"), format!("{energy}\n")).unwrap();
        std::fs::write(dir.join("max_energy_range_uj"), format!("{range}\n")).unwrap();
    }

    #[test]
    fn rapl_counts_packages_and_memory_across_a_wrap() {
        let root = tempfile::tempdir().unwrap();
        zone(root.path(), "intel-rapl:0", "package-0", 900, 1000);
        zone(root.path(), "intel-rapl:0:0", "core", 5, 1000);
        zone(root.path(), "intel-rapl:0:1", "dram", 100, 1000);
        zone(root.path(), "intel-rapl:1", "package-1", 10, 1000);
        std::fs::create_dir_all(root.path().join("intel-rapl")).unwrap();
        let rapl = Rapl::detect(root.path()).unwrap();
        assert_eq!((rapl.packages.len(), rapl.dram.len()), (2, 1), "core is part of a package, not counted twice");
        let start = rapl.totals().unwrap();
        // Package 0 wraps: 900 → 1000 → 0 → 50 is 150 µJ; package 1 goes 10 → 60; DRAM 100 → 400.
        std::fs::write(root.path().join("intel-rapl:0/energy_uj"), "50").unwrap();
        std::fs::write(root.path().join("intel-rapl:1/energy_uj"), "60").unwrap();
        std::fs::write(root.path().join("intel-rapl:0:1/energy_uj"), "400").unwrap();
        let end = rapl.totals().unwrap();
        assert_eq!(end.packages_uj - start.packages_uj, 200);
        assert_eq!(end.dram_uj - start.dram_uj, 300);
    }

    #[test]
    fn a_jobs_share_is_its_cpu_time_over_the_hosts() {
        let start = RaplTotals { packages_uj: 0, dram_uj: 0, host_cpu_seconds: 100.0 };
        let end = RaplTotals { packages_uj: 3_600_000_000, dram_uj: 360_000_000, host_cpu_seconds: 110.0 };
        // 1 Wh of packages and 0.1 Wh of DRAM while the host used 10 CPU-seconds, 2.5 of them the job's.
        let (cpu, memory) = start.share(&end, 2.5);
        assert!((cpu.unwrap().wh - 0.25).abs() < 1e-12);
        assert!((memory.unwrap().wh - 0.025).abs() < 1e-12);
        assert_eq!(cpu.unwrap().source, EnergySource::Rapl);
        // More than the host (clocks disagree a little): all of it, no more.
        assert!((start.share(&end, 12.0).0.unwrap().wh - 1.0).abs() < 1e-12);
        // The host used nothing: nothing can be shared.
        assert_eq!(start.share(&start, 1.0), (None, None));
    }

    #[test]
    fn the_hosts_cpu_time_is_its_busy_columns() {
        let stat = "cpu  100 5 50 1000 20 3 2 7 0 0\ncpu0 50 2 25 500 10 1 1 3 0 0\n";
        assert_eq!(host_busy_ticks(stat), Some(100 + 5 + 50 + 3 + 2));
        assert!(host_cpu_seconds().is_some_and(|s| s > 0.0), "this host's /proc/stat");
    }

    #[test]
    fn a_missing_or_unreadable_tree_measures_nothing() {
        assert!(Rapl::detect(Path::new("/nonexistent")).is_none());
        let root = tempfile::tempdir().unwrap();
        zone(root.path(), "intel-rapl:0:1", "dram", 1, 10);
        assert!(Rapl::detect(root.path()).is_none(), "memory without a package is not enough");
    }
}
