//! `mission stations`: stations, their members and their landing zones.

use anyhow::bail;
use clap::Subcommand;
use mission_api::PriceBook;
use mission_client::{Client, CreateStation, LandingZone, RegisterLandingZone, Station, UpdateStation, Uuid};

use crate::output::Output;
use crate::session;

/// Manage stations: pools of landing zones (compute hosts) with an access list.
///
/// Admins create stations and name their owner; an owner manages members and landing zones.
/// Register a compute host with `mission stations add-lz STATION NAME`, then run the printed
/// `mission lz` command on it.
#[derive(Debug, Subcommand)]
pub enum StationsCommand {
    /// List the stations you may run jobs on (all, for admins).
    List,
    /// Show a station and its landing zones.
    Get {
        /// Name or id.
        station: String,
    },
    /// Create a station (admins).
    Create {
        /// Unique name.
        name: String,
        /// Free text.
        #[arg(long)]
        description: Option<String>,
        /// Let every signed-in user run jobs here (default: members only).
        #[arg(long)]
        open: bool,
        /// The user (id) who will manage it (default: you).
        #[arg(long)]
        owner: Option<Uuid>,
        /// Never stop jobs that borrow room beyond their project's nominal here, even when a
        /// project below its nominal waits for the room (default: they are reclaimed).
        #[arg(long)]
        no_reclaim: bool,
        /// The network of the containers its jobs run in: the host's (default) or none.
        #[arg(long, value_name = "host|none")]
        container_network: Option<mission_client::ContainerNetwork>,
    },
    /// Change a station's description, access, reclaiming or containers' network (its owner or
    /// admins).
    ///
    /// Reclaiming: a project may run beyond its nominal limits on a station while others leave
    /// room idle (`mission projects limits --borrow-cpus`). When a project below its nominal
    /// then waits for room, such borrowed jobs are stopped (SIGTERM, then SIGKILL after the
    /// server's --reclaim-grace-seconds) and put back in line at their old place.
    Update {
        /// Name or id.
        station: String,
        /// New free text.
        #[arg(long)]
        description: Option<String>,
        /// Let every signed-in user run jobs here (true), or members only (false).
        #[arg(long, value_name = "BOOL")]
        open: Option<bool>,
        /// Reclaim borrowed room for projects below their nominal (true, the default) or never
        /// (false).
        #[arg(long, value_name = "BOOL")]
        reclaim: Option<bool>,
        /// The network of the containers its jobs run in: the host's or none.
        #[arg(long, value_name = "host|none")]
        container_network: Option<mission_client::ContainerNetwork>,
    },
    /// Show or change how a station's jobs' energy, carbon and cost are reckoned.
    ///
    /// Without flags, its settings. Flags (admins) change those they name; the rest stay. A job
    /// is reckoned as it ends: CPU-seconds times the watts of a core, memory held times the
    /// watts of a gigabyte, GPUs held times their watts, all times the PUE, for its energy; that
    /// times the grid's intensity for its CO2e; the prices times the CPU-, GPU- and GB-hours it
    /// held and the kWh it drew for its cost.
    ///
    ///   mission stations energy local --pue 1.2 --grid-intensity 30
    ///   mission stations energy local --currency EUR --price-cpu-hour 0.02 --price-kwh 0.25
    #[command(verbatim_doc_comment)]
    Energy {
        /// Name or id.
        station: String,
        /// Watts one busy CPU core draws (the processor's TDP over its cores).
        #[arg(long, value_name = "WATTS")]
        cpu_watts_per_core: Option<f64>,
        /// Watts a gigabyte of memory draws.
        #[arg(long, value_name = "WATTS")]
        memory_watts_per_gb: Option<f64>,
        /// Watts one GPU draws while a job holds it.
        #[arg(long, value_name = "WATTS")]
        gpu_watts: Option<f64>,
        /// The data centre's power usage effectiveness (1 to 5).
        #[arg(long, value_name = "RATIO")]
        pue: Option<f64>,
        /// The grid's carbon intensity, grams of CO2e per kWh (and no file).
        #[arg(long, value_name = "G_PER_KWH")]
        grid_intensity: Option<f64>,
        /// Read the grid's intensity every minute from this file on the server's host (an
        /// absolute path; a number of gCO2e/kWh alone), which the site refreshes; a missing or
        /// malformed file keeps the last good value and the station says so.
        #[arg(long, value_name = "PATH", conflicts_with = "grid_intensity")]
        grid_intensity_file: Option<String>,
        /// Charge jobs in this currency (an ISO 4217 code: EUR, USD, CHF), at the prices given.
        #[arg(long, value_name = "CODE")]
        currency: Option<String>,
        /// Price of an hour of one CPU held.
        #[arg(long, value_name = "PRICE")]
        price_cpu_hour: Option<f64>,
        /// Price of an hour of one GPU held.
        #[arg(long, value_name = "PRICE")]
        price_gpu_hour: Option<f64>,
        /// Price of an hour of a gigabyte of memory held.
        #[arg(long, value_name = "PRICE")]
        price_gb_hour: Option<f64>,
        /// Price of a kWh drawn.
        #[arg(long, value_name = "PRICE")]
        price_kwh: Option<f64>,
        /// Charge nothing: drop the prices.
        #[arg(long, conflicts_with_all = ["currency", "price_cpu_hour", "price_gpu_hour", "price_gb_hour", "price_kwh"])]
        no_prices: bool,
    },
    /// Delete a station with its members and landing zones (admins).
    Delete {
        /// Name or id.
        station: String,
    },
    /// List a station's members.
    Members {
        /// Name or id.
        station: String,
    },
    /// Let a user run jobs on a station.
    AddMember {
        /// Name or id.
        station: String,
        /// Username or user id.
        user: String,
    },
    /// Take a user off a station.
    RemoveMember {
        /// Name or id.
        station: String,
        /// Username or user id.
        user: String,
    },
    /// Register a landing zone and print the token its agent connects with (shown once).
    AddLz {
        /// Name or id.
        station: String,
        /// A name for the landing zone, unique in the station.
        name: String,
        /// Make it a gateway into a Slurm cluster whose agent runs as (and submits every job as)
        /// this cluster account. Every job of the station's members that lands there runs as
        /// that account and can read what it can: add only members who may share it.
        #[arg(long, value_name = "ACCOUNT")]
        slurm_account: Option<String>,
    },
    /// Remove a landing zone (its agent's token stops working).
    RemoveLz {
        /// Name or id.
        station: String,
        /// Landing zone name or id.
        lz: String,
    },
}

/// The id of a station given by id or name.
pub async fn resolve_station(client: &Client, given: &str) -> anyhow::Result<Uuid> {
    if let Ok(id) = Uuid::parse_str(given) {
        return Ok(id);
    }
    let stations = client.list_stations().await?;
    match stations.iter().find(|s| s.name == given) {
        Some(s) => Ok(s.station_id),
        None => {
            let names: Vec<_> = stations.iter().map(|s| s.name.as_str()).collect();
            bail!("no station {given:?} you may use; yours: {}", names.join(", "))
        }
    }
}

/// The id of a landing zone of `station_id` given by id or name.
pub async fn resolve_lz(client: &Client, station_id: Uuid, given: &str) -> anyhow::Result<Uuid> {
    if let Ok(id) = Uuid::parse_str(given) {
        return Ok(id);
    }
    let lzs = client.list_landing_zones(station_id).await?;
    match lzs.iter().find(|lz| lz.name == given) {
        Some(lz) => Ok(lz.lz_id),
        None => {
            let names: Vec<_> = lzs.iter().map(|lz| lz.name.as_str()).collect();
            bail!("the station has no landing zone {given:?}; it has: {}", names.join(", "))
        }
    }
}

fn lz_rows(lzs: &[LandingZone]) -> Vec<Vec<String>> {
    lzs.iter()
        .map(|lz| {
            let offers = lz.resources.map_or_else(
                || "(never connected)".to_owned(),
                |r| format!("{} CPU, {} MB, {} GPU", r.cpu_count, r.memory_amount, r.gpu_count),
            );
            let runs = match (&lz.cluster_account, lz.pilot_of) {
                (Some(account), _) => format!("Slurm, as {account}"),
                (None, Some(gateway)) => format!("pilot of {gateway}"),
                (None, None) => "on the host".to_owned(),
            };
            let runs = if lz.images { format!("{runs}; in images too") } else { runs };
            let state = if lz.online { "online" } else { "offline" }.to_owned();
            vec![lz.name.clone(), lz.lz_id.to_string(), state, offers, runs]
        })
        .collect()
}

fn access(station: &Station) -> &'static str {
    if station.open { "open to all" } else { "members only" }
}

impl StationsCommand {
    /// Runs the subcommand.
    pub async fn run(self, server: Option<&str>, out: Output) -> anyhow::Result<()> {
        let client = session::connect(server).await?;
        match self {
            StationsCommand::List => {
                let stations = client.list_stations().await?;
                let rows = stations
                    .iter()
                    .map(|s| {
                        vec![s.name.clone(), s.station_id.to_string(), access(s).to_owned(), s.description.clone()]
                    })
                    .collect();
                out.table(&stations, &["NAME", "ID", "ACCESS", "DESCRIPTION"], rows);
            }
            StationsCommand::Get { station } => {
                let station = client.get_station(resolve_station(&client, &station).await?).await?;
                let lzs = client.list_landing_zones(station.station_id).await?;
                if out.json {
                    out.done(&serde_json::json!({ "station": station, "landing_zones": lzs }), "");
                    return Ok(());
                }
                out.record(
                    &station,
                    vec![
                        ("name", station.name.clone()),
                        ("id", station.station_id.to_string()),
                        ("access", access(&station).to_owned()),
                        ("owner", station.owner_id.map_or_else(|| "admins".to_owned(), |id| id.to_string())),
                        ("reclaims borrowed room", if station.reclaim { "yes" } else { "no" }.to_owned()),
                        ("container network", station.container_network.to_string()),
                        ("description", station.description.clone()),
                    ],
                );
                println!();
                out.table(&lzs, &["LANDING ZONE", "ID", "STATE", "OFFERS", "JOBS RUN"], lz_rows(&lzs));
            }
            StationsCommand::Create { name, description, open, owner, no_reclaim, container_network } => {
                let request = CreateStation {
                    name,
                    description,
                    open: Some(open),
                    owner_id: owner,
                    reclaim: Some(!no_reclaim),
                    container_network,
                };
                let station = client.create_station(&request).await?;
                out.done(&station, &format!("created station {} ({})", station.name, station.station_id));
            }
            StationsCommand::Update { station, description, open, reclaim, container_network } => {
                let changes = UpdateStation { description, open, reclaim, container_network, energy: None };
                if changes == UpdateStation::default() {
                    bail!("nothing to change: give --description, --open, --reclaim or --container-network");
                }
                let id = resolve_station(&client, &station).await?;
                let station = client.update_station(id, &changes).await?;
                let reclaims = if station.reclaim { "reclaims" } else { "does not reclaim" };
                out.done(
                    &station,
                    &format!("updated station {}: {}, {reclaims} borrowed room", station.name, access(&station)),
                );
            }
            StationsCommand::Energy {
                station,
                cpu_watts_per_core,
                memory_watts_per_gb,
                gpu_watts,
                pue,
                grid_intensity,
                grid_intensity_file,
                currency,
                price_cpu_hour,
                price_gpu_hour,
                price_gb_hour,
                price_kwh,
                no_prices,
            } => {
                let id = resolve_station(&client, &station).await?;
                let mut station = client.get_station(id).await?;
                let energy = &mut station.energy;
                let before = energy.clone();
                let set = |field: &mut f64, value: Option<f64>| *field = value.unwrap_or(*field);
                set(&mut energy.cpu_watts_per_core, cpu_watts_per_core);
                set(&mut energy.memory_watts_per_gb, memory_watts_per_gb);
                set(&mut energy.gpu_watts, gpu_watts);
                set(&mut energy.pue, pue);
                set(&mut energy.grid_gco2e_per_kwh, grid_intensity);
                if grid_intensity.is_some() {
                    energy.grid_intensity_file = None;
                }
                if grid_intensity_file.is_some() {
                    energy.grid_intensity_file = grid_intensity_file;
                }
                let prices = [price_cpu_hour, price_gpu_hour, price_gb_hour, price_kwh];
                if no_prices {
                    energy.prices = None;
                } else if currency.is_some() || prices.iter().any(Option::is_some) {
                    let mut book = match (energy.prices.take(), currency) {
                        (Some(book), None) => book,
                        (Some(book), Some(currency)) => PriceBook { currency, ..book },
                        (None, Some(currency)) => {
                            PriceBook { currency, cpu_hour: 0.0, gpu_hour: 0.0, gb_hour: 0.0, kwh: 0.0 }
                        }
                        (None, None) => bail!("the station charges nothing yet: give --currency with its prices"),
                    };
                    set(&mut book.cpu_hour, price_cpu_hour);
                    set(&mut book.gpu_hour, price_gpu_hour);
                    set(&mut book.gb_hour, price_gb_hour);
                    set(&mut book.kwh, price_kwh);
                    energy.prices = Some(book);
                }
                if *energy != before {
                    let changes = UpdateStation { energy: Some(energy.clone()), ..Default::default() };
                    station = client.update_station(id, &changes).await?;
                }
                let e = &station.energy;
                let mut fields = vec![
                    ("station", station.name.clone()),
                    ("cpu watts per core", e.cpu_watts_per_core.to_string()),
                    ("memory watts per GB", e.memory_watts_per_gb.to_string()),
                    ("GPU watts", e.gpu_watts.to_string()),
                    ("PUE", e.pue.to_string()),
                    ("grid intensity", format!("{} gCO2e/kWh", e.grid_gco2e_per_kwh)),
                ];
                if let Some(file) = &e.grid_intensity_file {
                    let read = station.grid_intensity_problem.clone().unwrap_or_else(|| "read every minute".into());
                    fields.push(("grid intensity file", format!("{file} ({read})")));
                }
                fields.push(match &e.prices {
                    Some(p) => (
                        "prices",
                        format!(
                            "{c} {} per CPU-hour, {c} {} per GPU-hour, {c} {} per GB-hour, {c} {} per kWh",
                            p.cpu_hour,
                            p.gpu_hour,
                            p.gb_hour,
                            p.kwh,
                            c = p.currency
                        ),
                    ),
                    None => ("prices", "none: jobs are not charged".into()),
                });
                out.record(&station, fields);
            }
            StationsCommand::Delete { station } => {
                let id = resolve_station(&client, &station).await?;
                if !client.delete_station(id).await? {
                    bail!("no station {station}");
                }
                out.done(&serde_json::json!({ "deleted": id }), &format!("deleted station {station}"));
            }
            StationsCommand::Members { station } => {
                let members = client.station_members(resolve_station(&client, &station).await?).await?;
                let rows = members
                    .iter()
                    .map(|m| vec![m.username.clone(), m.user_id.to_string(), m.added_at.format("%Y-%m-%d").to_string()])
                    .collect();
                out.table(&members, &["USER", "ID", "ADDED"], rows);
            }
            StationsCommand::AddMember { station, user } => {
                client.add_station_member(resolve_station(&client, &station).await?, &user).await?;
                out.done(&serde_json::json!({ "added": user }), &format!("{user} may now run jobs on {station}"));
            }
            StationsCommand::RemoveMember { station, user } => {
                if !client.remove_station_member(resolve_station(&client, &station).await?, &user).await? {
                    bail!("{user} is not a member of {station}");
                }
                out.done(&serde_json::json!({ "removed": user }), &format!("removed {user} from {station}"));
            }
            StationsCommand::AddLz { station, name, slurm_account } => {
                let id = resolve_station(&client, &station).await?;
                let request = RegisterLandingZone { name, cluster_account: slurm_account };
                let registered = client.register_landing_zone(id, &request).await?;
                let (host, runner) = match &registered.landing_zone.cluster_account {
                    Some(account) => (
                        format!("a login node of the cluster, as {account}"),
                        " --runner slurm --work-root DIR-ON-THE-SHARED-FILESYSTEM",
                    ),
                    None => ("the compute host".to_owned(), ""),
                };
                let message = format!(
                    "registered landing zone {} ({}).\nIts token (shown once): {}\nOn {host} run:\n  \
                     MISSION_LZ_TOKEN={} mission lz --server {}{runner}",
                    registered.landing_zone.name,
                    registered.landing_zone.lz_id,
                    registered.token,
                    registered.token,
                    client.base_urls()
                );
                out.done(&registered, &message);
            }
            StationsCommand::RemoveLz { station, lz } => {
                let station_id = resolve_station(&client, &station).await?;
                let lz_id = resolve_lz(&client, station_id, &lz).await?;
                if !client.remove_landing_zone(station_id, lz_id).await? {
                    bail!("no landing zone {lz} in {station}");
                }
                out.done(&serde_json::json!({ "removed": lz_id }), &format!("removed landing zone {lz}"));
            }
        }
        Ok(())
    }
}
