//! `sinfo`: stations as partitions and their landing zones as nodes, in Slurm's default layout,
//! node by node (`-N`), or a `-o` format of `%` fields.

use mission_client::LandingZone;

use super::options::{Spec, Takes, flag, ignored, value};
use super::squeue::{percent_columns, render};
use super::{Failure, Site, print_version, read_query, report};

const OPTIONS: &[Spec] = &[
    value("format", Some('o')),
    flag("noheader", Some('h')),
    flag("Node", Some('N')),
    value("partition", Some('p')),
    value("nodes", Some('n')),
    flag("long", Some('l')),
    flag("summarize", Some('s')),
    flag("json", None),
    flag("help", None),
    flag("version", Some('V')),
    flag("all", Some('a')),
    flag("responding", Some('r')),
    flag("dead", Some('d')),
    value("states", Some('t')),
    ignored("iterate", Some('i'), Takes::Value),
    ignored("clusters", Some('M'), Takes::Value),
    ignored("Format", Some('O'), Takes::Value),
    ignored("exact", Some('e'), Takes::Nothing),
    ignored("verbose", Some('v'), Takes::Nothing),
];

/// Slurm's default formats.
const DEFAULT: &str = "%9P %.5a %.10l %.6D %.6t %N";
const NODES: &str = "%N %.6D %9P %6t";
const SUMMARY: &str = "%9P %.5a %.10l %.16F %N";

pub async fn run(args: &[String]) -> u8 {
    report("sinfo", info(args).await)
}

/// A landing zone's state in Slurm's words: idle, mixed, allocated or down.
fn state(lz: &LandingZone) -> &'static str {
    let total = lz.resources.map_or(0, |r| r.cpu_count);
    match (lz.online, lz.in_use.cpu_count) {
        (false, _) => "down",
        (true, 0) => "idle",
        (true, used) if used >= total => "alloc",
        _ => "mix",
    }
}

async fn info(args: &[String]) -> Result<(), Failure> {
    let given = read_query("sinfo", args, OPTIONS)?;
    if given.has("version") {
        print_version();
        return Ok(());
    }
    if given.has("help") {
        println!("Usage: sinfo [-h] [-N] [-p partitions] [-o format] [-s]");
        return Ok(());
    }
    let site = Site::open().await?;
    let wanted: Vec<&str> = given.all("partition").flat_map(|p| p.split(',')).collect();
    let default = mission_api::DEFAULT_STATION_NAME;
    let format = given.last("format").unwrap_or(if given.has("Node") {
        NODES
    } else if given.has("summarize") {
        SUMMARY
    } else {
        DEFAULT
    });
    let columns = percent_columns(format);
    // Rows: each node on its own with -N; else the nodes of a partition grouped by state.
    let mut rows: Vec<(String, Vec<&LandingZone>)> = Vec::new();
    for station in site.partitions.iter().filter(|s| wanted.is_empty() || wanted.contains(&s.name.as_str())) {
        let lzs: Vec<&LandingZone> =
            site.landing_zones.iter().filter(|lz| lz.station_id == station.station_id).collect();
        if given.has("Node") {
            rows.extend(lzs.into_iter().map(|lz| (station.name.clone(), vec![lz])));
            continue;
        }
        let mut groups: Vec<(&str, Vec<&LandingZone>)> = Vec::new();
        for lz in lzs {
            match groups.iter_mut().find(|(s, _)| given.has("summarize") || *s == state(lz)) {
                Some((_, group)) => group.push(lz),
                None => groups.push((state(lz), vec![lz])),
            }
        }
        if groups.is_empty() {
            groups.push(("n/a", Vec::new()));
        }
        rows.extend(groups.into_iter().map(|(_, group)| (station.name.clone(), group)));
    }
    let mut out = String::new();
    if !given.has("noheader") {
        out.push_str(&render(&columns, |letter| header(letter).to_owned()));
        out.push('\n');
    }
    for (partition, lzs) in &rows {
        let value = |letter: char| -> String {
            let first = lzs.first().copied();
            let sum = |f: fn(&LandingZone) -> u64| lzs.iter().map(|lz| f(lz)).sum::<u64>();
            match letter {
                'P' if partition == default && !given.has("Node") => format!("{partition}*"),
                'P' | 'R' => partition.clone(),
                'a' => "up".to_owned(),
                'l' => "infinite".to_owned(),
                'D' => lzs.len().to_string(),
                't' | 'T' => first.map_or("n/a", state).to_owned(),
                'N' | 'n' => lzs.iter().map(|lz| lz.name.as_str()).collect::<Vec<_>>().join(","),
                'c' => first.and_then(|lz| lz.resources).map_or(0, |r| r.cpu_count).to_string(),
                'm' => first.and_then(|lz| lz.resources).map_or(0, |r| r.memory_amount).to_string(),
                'G' => match first.and_then(|lz| lz.resources).map_or(0, |r| r.gpu_count) {
                    0 => "(null)".to_owned(),
                    n => format!("gpu:{n}"),
                },
                'C' => {
                    let total = sum(|lz| lz.resources.map_or(0, |r| u64::from(r.cpu_count)));
                    let used = sum(|lz| u64::from(lz.in_use.cpu_count));
                    let offline =
                        sum(|lz| if lz.online { 0 } else { lz.resources.map_or(0, |r| u64::from(r.cpu_count)) });
                    format!("{used}/{}/{offline}/{total}", total.saturating_sub(used + offline))
                }
                'F' => {
                    let count = |s: &str| lzs.iter().filter(|lz| state(lz) == s).count();
                    format!("{}/{}/{}/{}", count("alloc") + count("mix"), count("idle"), count("down"), lzs.len())
                }
                _ => String::new(),
            }
        };
        out.push_str(&render(&columns, value));
        out.push('\n');
    }
    print!("{out}");
    Ok(())
}

fn header(letter: char) -> &'static str {
    match letter {
        'P' | 'R' => "PARTITION",
        'a' => "AVAIL",
        'l' => "TIMELIMIT",
        'D' => "NODES",
        't' | 'T' => "STATE",
        'N' => "NODELIST",
        'n' => "HOSTNAMES",
        'c' => "CPUS",
        'm' => "MEMORY",
        'G' => "GRES",
        'C' => "CPUS(A/I/O/T)",
        'F' => "NODES(A/I/O/T)",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_header_is_slurms() {
        let captured = include_str!("../../../../fixtures/slurm/sinfo.txt");
        let line = super::render(&super::percent_columns(super::DEFAULT), |l| super::header(l).to_owned());
        assert_eq!(captured.lines().next().unwrap(), line);
    }
}
