//! What a job cost: its energy, carbon and money, from what it held and used and the settings of
//! the station it ran on.
//!
//! Where the hardware tells, energy is measured: the landing zone reads the GPUs' own energy
//! counters (or samples their power), and the processors' and memory's RAPL counters scaled by the
//! job's share of the host's CPU time; a Slurm cluster's accounting gives its own figure. Each
//! part of a job's energy ([`EnergyParts`]) says where it came from.
//!
//! Where the hardware gives no figure, energy is modelled as the Green Algorithms method does
//! (Lannelongue et al., 2021): the CPU-seconds a job used times the power of a core, the memory it
//! held times the power of a gigabyte, the GPUs it held times their power, all for as long as it
//! ran, times the data centre's PUE. Carbon is that energy times the grid's intensity; money is
//! the station's price book applied to what the job held (CPU-, GPU- and GB-hours, as sites
//! charge allocations) and to the energy. Every figure a station sets has a documented default
//! and bounds: a price or intensity out of them is refused, naming the field.

use serde::{Deserialize, Serialize};

/// How a station turns what a job used into energy, carbon and money.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default, deny_unknown_fields)]
pub struct StationEnergy {
    /// Watts one busy CPU core draws (the processor's TDP over its cores). Default 12.
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1000))]
    pub cpu_watts_per_core: f64,
    /// Watts a gigabyte of memory draws. Default 0.3725 (Green Algorithms).
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 100))]
    pub memory_watts_per_gb: f64,
    /// Watts one GPU draws while a job holds it, where its own counter gives no figure.
    /// Default 300.
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 5000))]
    pub gpu_watts: f64,
    /// The data centre's power usage effectiveness: all it draws over what its computers do.
    /// Default 1.67 (the Uptime Institute's mean, as Green Algorithms takes it); 1 to 5.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 5))]
    pub pue: f64,
    /// The electricity grid's carbon intensity in grams of CO₂-equivalent per kWh. Default 475
    /// (the world's mean in Green Algorithms); 0 to 2000. With `grid_intensity_file`, the last
    /// good value read from it.
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 2000))]
    pub grid_gco2e_per_kwh: f64,
    /// A file on the server's host that the site keeps the grid's current intensity in (gCO₂e
    /// per kWh, a number alone), read every minute. A file that is missing or does not hold a
    /// number from 0 to 2000 leaves the last good value in place, and the station says why
    /// ([`crate::Station::grid_intensity_problem`]). An absolute path, at most 4096 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^/[^\\x00]*$", max_length = 4096))]
    pub grid_intensity_file: Option<String>,
    /// What jobs are charged; none by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prices: Option<PriceBook>,
}

/// A station's prices, in one currency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PriceBook {
    /// ISO 4217 code: three capital letters (`EUR`, `USD`, `CHF`).
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Z]{3}$"))]
    pub currency: String,
    /// Per hour of one CPU held.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1_000_000))]
    pub cpu_hour: f64,
    /// Per hour of one GPU held.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1_000_000))]
    pub gpu_hour: f64,
    /// Per hour of a gigabyte of memory held.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1_000_000))]
    pub gb_hour: f64,
    /// Per kWh the job drew (PUE included).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1_000_000))]
    pub kwh: f64,
}

impl Default for StationEnergy {
    fn default() -> Self {
        Self {
            cpu_watts_per_core: 12.0,
            memory_watts_per_gb: 0.3725,
            gpu_watts: 300.0,
            pue: 1.67,
            grid_gco2e_per_kwh: 475.0,
            grid_intensity_file: None,
            prices: None,
        }
    }
}

/// The largest price of anything, per unit: past it, a typo rather than a tariff.
const MAX_PRICE: f64 = 1.0e6;

impl StationEnergy {
    /// Why these settings cannot be taken, if they cannot: the field, and its bounds.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        let bounds = [
            ("energy.cpu_watts_per_core", self.cpu_watts_per_core, 0.0, 1000.0),
            ("energy.memory_watts_per_gb", self.memory_watts_per_gb, 0.0, 100.0),
            ("energy.gpu_watts", self.gpu_watts, 0.0, 5000.0),
            ("energy.pue", self.pue, 1.0, 5.0),
            ("energy.grid_gco2e_per_kwh", self.grid_gco2e_per_kwh, 0.0, 2000.0),
        ];
        let prices = self.prices.iter().flat_map(|p| {
            [
                ("energy.prices.cpu_hour", p.cpu_hour, 0.0, MAX_PRICE),
                ("energy.prices.gpu_hour", p.gpu_hour, 0.0, MAX_PRICE),
                ("energy.prices.gb_hour", p.gb_hour, 0.0, MAX_PRICE),
                ("energy.prices.kwh", p.kwh, 0.0, MAX_PRICE),
            ]
        });
        for (field, value, low, high) in bounds.into_iter().chain(prices) {
            // NaN fails both comparisons' negation: it is refused too.
            if !(low..=high).contains(&value) {
                return Some((field, format!("must be from {low} to {high}, not {value}")));
            }
        }
        if let Some(file) = &self.grid_intensity_file
            && (!file.starts_with('/') || file.contains('\0') || file.chars().count() > 4096)
        {
            return Some((
                "energy.grid_intensity_file",
                "must be an absolute path (no NUL, at most 4096 characters)".into(),
            ));
        }
        let currency = self.prices.as_ref().map(|p| p.currency.as_str());
        if let Some(code) = currency.filter(|c| !is_currency(c)) {
            return Some(("energy.prices.currency", format!("must be an ISO 4217 code such as EUR, not {code:?}")));
        }
        None
    }

    /// What a job cost that held `held` and used `cpu_seconds` of CPU over `wall_seconds`, with
    /// the parts of its energy its landing zone `measured`; the model gives the others.
    pub fn footprint(
        &self,
        held: &Held,
        wall_seconds: f64,
        cpu_seconds: Option<f64>,
        measured: Option<&EnergyParts>,
    ) -> Footprint {
        let hours = wall_seconds.max(0.0) / 3600.0;
        // Without a measured CPU time, every CPU it held counts as busy.
        let cpu_hours = cpu_seconds.map_or(f64::from(held.cpus) * hours, |s| s.max(0.0) / 3600.0);
        let memory_gb = held.memory_mb as f64 / 1000.0;
        let modelled = |wh: f64| Some(EnergyPart { wh, source: EnergySource::Model });
        let measured = measured.cloned().unwrap_or_default().plausible(held, wall_seconds);
        let parts = EnergyParts {
            cpu: measured.cpu.or_else(|| modelled(cpu_hours * self.cpu_watts_per_core)),
            memory: measured.memory.or_else(|| modelled(memory_gb * hours * self.memory_watts_per_gb)),
            gpu: measured.gpu.or_else(|| modelled(f64::from(held.gpus) * hours * self.gpu_watts)),
        };
        let energy_kwh = parts.watt_hours() * self.pue / 1000.0;
        let cost = self.prices.as_ref().map(|p| Cost {
            amount: f64::from(held.cpus) * hours * p.cpu_hour
                + f64::from(held.gpus) * hours * p.gpu_hour
                + memory_gb * hours * p.gb_hour
                + energy_kwh * p.kwh,
            currency: p.currency.clone(),
        });
        Footprint { energy_kwh, co2e_g: energy_kwh * self.grid_gco2e_per_kwh, cost, parts }
    }
}

/// The parts of a job's energy, in watt-hours drawn by the equipment (before the data centre's
/// overhead, the PUE), each with where it came from. A landing zone reports the parts it measured;
/// the server models the rest as the job ends.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EnergyParts {
    /// The processors'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<EnergyPart>,
    /// The memory's. Where a Slurm cluster's figure is the CPU part, memory's is inside it and
    /// this part is 0 with the same source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<EnergyPart>,
    /// The GPUs'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<EnergyPart>,
}

/// One part of a job's energy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EnergyPart {
    /// Watt-hours, before the PUE.
    pub wh: f64,
    /// Where the figure came from.
    pub source: EnergySource,
}

/// Where a part of a job's energy came from: measured, or modelled by its station's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EnergySource {
    /// Modelled: the station's watts per core, per GB or per GPU ([`StationEnergy`]).
    Model,
    /// Measured by the processors' RAPL counters (packages, or DRAM for memory): the host's
    /// energy over the job's run times the job's share of the CPU time the host used.
    Rapl,
    /// Measured by the GPUs' own energy counters (NVML's total energy), read as the job started
    /// and ended.
    GpuCounter,
    /// Measured by sampling the GPUs' power draw while the job ran, and integrating it.
    GpuPowerSamples,
    /// The Slurm cluster's own figure for the job (`sacct`'s ConsumedEnergy).
    Slurm,
}

impl EnergySource {
    /// Whether the figure was measured rather than modelled.
    pub fn is_measured(self) -> bool {
        self != Self::Model
    }
}

/// The most a device may draw for a measured part to be believed, in watts per unit held (a GPU,
/// a CPU, a GB): past it a counter wrapped or an agent is wrong, and the model is used instead.
const MAX_MEASURED_WATTS: f64 = 5000.0;

impl EnergyParts {
    /// The sum of the parts there are.
    pub fn watt_hours(&self) -> f64 {
        [&self.cpu, &self.memory, &self.gpu].into_iter().flatten().map(|part| part.wh).sum()
    }

    /// These parts, less any that cannot be true of a job that held `held` for `wall_seconds`
    /// (negative, not finite, more than [`MAX_MEASURED_WATTS`] a unit held, anything of a kind it
    /// held none of) or that claim to be
    /// modelled: measured figures come from a landing zone, which does not speak for the model.
    fn plausible(self, held: &Held, wall_seconds: f64) -> Self {
        let hours = wall_seconds.max(1.0) / 3600.0;
        let believed = |part: Option<EnergyPart>, units: f64| {
            part.filter(|p| {
                p.source.is_measured() && p.wh.is_finite() && p.wh >= 0.0 && p.wh <= units * hours * MAX_MEASURED_WATTS
            })
        };
        let gb = held.memory_mb as f64 / 1000.0;
        // A cluster's figure for the node covers its memory; the CPU part holds the whole node's.
        let node_units = f64::from(held.cpus) + gb + f64::from(held.gpus);
        Self {
            cpu: believed(
                self.cpu,
                if self.memory.as_ref().is_some_and(|m| m.source == EnergySource::Slurm) {
                    node_units
                } else {
                    f64::from(held.cpus)
                },
            ),
            memory: believed(self.memory, gb),
            gpu: believed(self.gpu, f64::from(held.gpus)),
        }
    }
}

/// The grid's intensity as a site's file gives it: a number of gCO₂e/kWh alone (surrounding
/// white space aside), from 0 to 2000; why not, where it does not.
pub fn grid_intensity(text: &str) -> Result<f64, String> {
    let value: f64 = text.trim().parse().map_err(|_| "does not hold a number of gCO2e/kWh alone".to_owned())?;
    if !(0.0..=2000.0).contains(&value) {
        return Err(format!("holds {value}, not a number of gCO2e/kWh from 0 to 2000"));
    }
    Ok(value)
}

/// Whether `code` is shaped as an ISO 4217 currency code: three capital letters.
pub fn is_currency(code: &str) -> bool {
    code.len() == 3 && code.bytes().all(|b| b.is_ascii_uppercase())
}

/// What a job held while it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// CPUs.
    pub cpus: u32,
    /// Memory, in megabytes.
    pub memory_mb: u64,
    /// GPUs.
    pub gpus: u32,
}

/// A job's energy, carbon and money.
#[derive(Debug, Clone, PartialEq)]
pub struct Footprint {
    /// Energy in kWh, the data centre's overhead (PUE) included.
    pub energy_kwh: f64,
    /// Grams of CO₂-equivalent.
    pub co2e_g: f64,
    /// What it was charged, where the station has prices.
    pub cost: Option<Cost>,
    /// Its energy's parts, measured or modelled.
    pub parts: EnergyParts,
}

/// An amount of money.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Cost {
    /// The amount, in the currency's units (not cents).
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1_000_000_000_000_i64))]
    pub amount: f64,
    /// ISO 4217 code: three capital letters.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Z]{3}$"))]
    pub currency: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    /// By hand: 12 cores at 12 W, fully used, for 2 h with 64 GB, PUE 1.67, 475 g/kWh.
    #[test]
    fn the_model_matches_hand_computed_cases() {
        let station = StationEnergy::default();
        let held = Held { cpus: 12, memory_mb: 64_000, gpus: 0 };
        let f = station.footprint(&held, 7200.0, Some(12.0 * 7200.0), None);
        // (12 × 2 h × 12 W + 64 GB × 2 h × 0.3725 W) × 1.67 = (288 + 47.68) × 1.67 = 560.5856 Wh.
        assert!(close(f.energy_kwh, 0.5605856), "{f:?}");
        assert!(close(f.co2e_g, 0.5605856 * 475.0), "{f:?}");
        assert_eq!(f.cost, None, "no prices, no cost");

        // Half the CPU time: only the CPU part halves.
        let f = station.footprint(&held, 7200.0, Some(6.0 * 7200.0), None);
        assert!(close(f.energy_kwh, (144.0 + 47.68) * 1.67 / 1000.0), "{f:?}");

        // One GPU for 30 minutes, 1 CPU, 1 GB, no CPU time measured (counted as busy), PUE 1,
        // 100 g/kWh, prices in EUR.
        let station = StationEnergy {
            pue: 1.0,
            grid_gco2e_per_kwh: 100.0,
            prices: Some(PriceBook {
                currency: "EUR".into(),
                cpu_hour: 0.02,
                gpu_hour: 1.5,
                gb_hour: 0.001,
                kwh: 0.25,
            }),
            ..StationEnergy::default()
        };
        let held = Held { cpus: 1, memory_mb: 1000, gpus: 1 };
        let f = station.footprint(&held, 1800.0, None, None);
        // 0.5 h × (12 + 0.3725 + 300) W = 156.18625 Wh.
        assert!(close(f.energy_kwh, 0.15618625), "{f:?}");
        assert!(close(f.co2e_g, 15.618625), "{f:?}");
        let cost = f.cost.unwrap();
        // 0.5 × 0.02 + 0.5 × 1.5 + 0.5 × 0.001 + 0.15618625 × 0.25
        assert!(close(cost.amount, 0.01 + 0.75 + 0.0005 + 0.0390465625), "{cost:?}");
        assert_eq!(cost.currency, "EUR");
    }

    /// Measured parts take the place of the model's; the rest is modelled; PUE applies to all.
    #[test]
    fn measured_parts_replace_the_models() {
        let station = StationEnergy { pue: 1.5, ..StationEnergy::default() };
        let held = Held { cpus: 2, memory_mb: 4000, gpus: 1 };
        let part = |wh, source| Some(EnergyPart { wh, source });
        let measured = EnergyParts { gpu: part(250.0, EnergySource::GpuCounter), ..Default::default() };
        // One hour: CPU 2 × 12 W (busy, no CPU time), memory 4 × 0.3725 W, the GPU's 250 Wh.
        let f = station.footprint(&held, 3600.0, None, Some(&measured));
        assert!(close(f.energy_kwh, (24.0 + 1.49 + 250.0) * 1.5 / 1000.0), "{f:?}");
        assert_eq!(f.parts.gpu, part(250.0, EnergySource::GpuCounter));
        assert_eq!(f.parts.cpu, part(24.0, EnergySource::Model));
        assert_eq!(f.parts.memory.unwrap().source, EnergySource::Model);

        // RAPL for the processors and memory, the GPU modelled.
        let measured =
            EnergyParts { cpu: part(10.0, EnergySource::Rapl), memory: part(2.0, EnergySource::Rapl), gpu: None };
        let f = station.footprint(&held, 3600.0, None, Some(&measured));
        assert!(close(f.energy_kwh, (10.0 + 2.0 + 300.0) * 1.5 / 1000.0), "{f:?}");

        // What cannot be true is not believed: negative, NaN, a GPU at 50 kW, a "measured" model.
        for wrong in [
            part(-1.0, EnergySource::GpuCounter),
            part(f64::NAN, EnergySource::GpuCounter),
            part(50_000.0, EnergySource::GpuCounter),
            part(1.0, EnergySource::Model),
        ] {
            let f = station.footprint(&held, 3600.0, None, Some(&EnergyParts { gpu: wrong, ..Default::default() }));
            assert_eq!(f.parts.gpu, part(300.0, EnergySource::Model));
        }
    }

    #[test]
    fn absurd_settings_are_refused_naming_the_field() {
        assert_eq!(StationEnergy::default().problem(), None);
        let cases = [
            (StationEnergy { pue: 0.5, ..Default::default() }, "energy.pue"),
            (StationEnergy { cpu_watts_per_core: -1.0, ..Default::default() }, "energy.cpu_watts_per_core"),
            (StationEnergy { grid_gco2e_per_kwh: f64::NAN, ..Default::default() }, "energy.grid_gco2e_per_kwh"),
            (StationEnergy { gpu_watts: 1e9, ..Default::default() }, "energy.gpu_watts"),
        ];
        for (settings, field) in cases {
            assert_eq!(settings.problem().map(|p| p.0), Some(field), "{:?}", settings.problem());
        }
        let prices = |currency: &str, kwh: f64| StationEnergy {
            prices: Some(PriceBook { currency: currency.into(), cpu_hour: 0.0, gpu_hour: 0.0, gb_hour: 0.0, kwh }),
            ..Default::default()
        };
        assert_eq!(prices("EUR", -0.1).problem().map(|p| p.0), Some("energy.prices.kwh"));
        assert_eq!(prices("euro", 0.1).problem().map(|p| p.0), Some("energy.prices.currency"));
        assert_eq!(prices("CHF", 0.1).problem(), None);
        let file = |path: &str| StationEnergy { grid_intensity_file: Some(path.into()), ..Default::default() };
        assert_eq!(file("intensity.txt").problem().map(|p| p.0), Some("energy.grid_intensity_file"));
        assert_eq!(file("/var/lib/grid/intensity").problem(), None);
    }

    #[test]
    fn a_grid_intensity_file_holds_a_number_alone() {
        assert_eq!(grid_intensity(" 231.5\n"), Ok(231.5));
        assert_eq!(grid_intensity("0"), Ok(0.0));
        for wrong in ["", "230 g", "NaN", "-4", "2001", "{\"intensity\": 230}"] {
            assert!(grid_intensity(wrong).is_err(), "{wrong:?}");
        }
    }
}
