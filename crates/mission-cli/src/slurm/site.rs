//! [`Site`]: what the Slurm commands look up besides jobs, by id and by name: the stations
//! (partitions), landing zones (nodes), projects (accounts), and who is signed in.

use std::collections::HashMap;

use mission_client::{Client, Job, JobStatus, ListJobs, Uuid};

use super::Failure;

/// What the commands look up besides jobs: the stations (partitions), landing zones (nodes)
/// and projects (accounts) by id and name, and who is signed in.
pub struct Site {
    pub client: Client,
    pub username: String,
    pub user_id: Uuid,
    stations: HashMap<Uuid, String>,
    nodes: HashMap<Uuid, String>,
    accounts: HashMap<Uuid, String>,
    /// The stations, in the order the service lists them.
    pub partitions: Vec<mission_client::Station>,
    /// Their landing zones.
    pub landing_zones: Vec<mission_client::LandingZone>,
    /// The cache the user and stations came from, if they did.
    cache: Option<cache::Key>,
}

/// What a command looks up besides the stations: the landing zones, the projects.
#[derive(Debug, Clone, Copy)]
pub struct Needs {
    pub nodes: bool,
    pub accounts: bool,
}

/// Every project the signed-in user can see, page by page.
async fn all_projects(client: &Client) -> Result<Vec<mission_client::Project>, mission_client::Error> {
    let mut all = Vec::new();
    for page in 1.. {
        let projects = client.list_projects(page, mission_api::MAX_ITEMS_PER_PAGE).await?.projects;
        let more = projects.len() as u32 == mission_api::MAX_ITEMS_PER_PAGE;
        all.extend(projects);
        if !more {
            break;
        }
    }
    Ok(all)
}

impl Site {
    /// Signs in with the saved session and reads every name.
    pub async fn open() -> Result<Self, Failure> {
        Self::open_for(Needs { nodes: true, accounts: true }).await
    }

    /// Signs in and reads the stations' names, and the landing zones' and projects' where the
    /// command `needs` them (a submission names them rarely, and each is a request or more).
    /// Where it needs neither, who is signed in and the stations come from the [`cache`] while
    /// it is fresh.
    pub async fn open_for(needs: Needs) -> Result<Self, Failure> {
        let client = crate::session::connect(None).await?;
        let cache = cache::Key::of(&client).await;
        // Query commands name the stations of every job they show: they read them afresh.
        let known = cache.as_ref().filter(|_| !needs.nodes && !needs.accounts).and_then(cache::Key::read);
        let from_cache = known.is_some();
        // Side by side: each is a round trip, and a workflow runs a command a job.
        let projects = async { if needs.accounts { all_projects(&client).await } else { Ok(Vec::new()) } };
        let known = async {
            match known {
                Some(known) => Ok(known),
                None => {
                    let (me, stations) = tokio::try_join!(client.whoami(), client.list_stations())?;
                    Ok(cache::Known { user_id: me.user_id, username: me.username, stations })
                }
            }
        };
        let (known, projects) = tokio::try_join!(known, projects)?;
        if let (Some(cache), false) = (&cache, from_cache) {
            cache.write(&known);
        }
        let landing_zones = if needs.nodes {
            let each = known.stations.iter().map(|station| client.list_landing_zones(station.station_id));
            futures_util::future::join_all(each).await.into_iter().flat_map(Result::unwrap_or_default).collect()
        } else {
            Vec::new()
        };
        // A personal project is named after its user (mission_store::projects::PERSONAL_MARK).
        let mut accounts = HashMap::from([(known.user_id, format!("~{}", known.username))]);
        accounts.extend(projects.into_iter().map(|p| (p.project_id, p.name)));
        Ok(Self {
            client,
            username: known.username,
            user_id: known.user_id,
            stations: known.stations.iter().map(|s| (s.station_id, s.name.clone())).collect(),
            nodes: landing_zones.iter().map(|lz: &mission_client::LandingZone| (lz.lz_id, lz.name.clone())).collect(),
            accounts,
            partitions: known.stations,
            landing_zones,
            cache: cache.filter(|_| from_cache),
        })
    }

    /// This site, or one read afresh where it came from the cache and does not know the station
    /// `name` (one made within the cache's lifetime).
    pub async fn knowing_station(self, name: &str, needs: Needs) -> Result<Self, Failure> {
        match &self.cache {
            Some(cache) if self.station_named(name).is_none() => {
                cache.forget();
                Self::open_for(needs).await
            }
            _ => Ok(self),
        }
    }

    /// Forgets the cached stations (after a submission they failed): the next command reads them
    /// afresh.
    pub fn forget_cached(&self) {
        if let Some(cache) = &self.cache {
            cache.forget();
        }
    }

    pub fn partition(&self, station_id: Uuid) -> &str {
        self.stations.get(&station_id).map_or("", String::as_str)
    }

    pub fn node(&self, lz_id: Option<Uuid>) -> &str {
        lz_id.and_then(|id| self.nodes.get(&id)).map_or("", String::as_str)
    }

    /// The names of the nodes `job` runs on (a gang's in rank order, comma-separated); empty
    /// while it is queued.
    pub fn nodes_of(&self, job: &mission_client::Job) -> String {
        match job.gang.as_ref().filter(|gang| !gang.lz_ids.is_empty()) {
            Some(gang) => gang.lz_ids.iter().map(|id| self.node(Some(*id))).collect::<Vec<_>>().join(","),
            None => self.node(job.lz_id).to_owned(),
        }
    }

    pub fn account(&self, project_id: Uuid) -> &str {
        self.accounts.get(&project_id).map_or("", String::as_str)
    }

    /// The station a partition names.
    pub fn station_named(&self, name: &str) -> Option<Uuid> {
        self.stations.iter().find(|(_, n)| *n == name).map(|(id, _)| *id)
    }

    /// The landing zone a node names.
    pub fn node_named(&self, name: &str) -> Option<Uuid> {
        self.nodes.iter().find(|(_, n)| *n == name).map(|(id, _)| *id)
    }

    /// The project an account names.
    pub fn account_named(&self, name: &str) -> Option<Uuid> {
        self.accounts.iter().find(|(_, n)| *n == name).map(|(id, _)| *id)
    }

    /// The accounts (projects) the signed-in user may charge, their personal one first.
    pub fn own_accounts(&self) -> Vec<&str> {
        let mut accounts = vec![self.account(self.user_id)];
        accounts.extend(self.accounts.iter().filter(|(id, _)| **id != self.user_id).map(|(_, name)| name.as_str()));
        accounts
    }

    /// The caller's jobs (everyone's, for admins) in `statuses` (every status when empty),
    /// newest first.
    pub async fn jobs(&self, statuses: &[JobStatus]) -> Result<Vec<Job>, Failure> {
        let mut all = Vec::new();
        let mut page = 1;
        loop {
            let options = ListJobs {
                statuses: statuses.to_vec(),
                page,
                items: mission_api::MAX_ITEMS_PER_PAGE,
                ..Default::default()
            };
            let jobs = self.client.list_jobs(&options).await?;
            let more = jobs.len() as u32 == mission_api::MAX_ITEMS_PER_PAGE;
            all.extend(jobs);
            if !more {
                return Ok(all);
            }
            page += 1;
        }
    }

    /// The user who started `job`: the signed-in user's name for their own jobs (an admin sees
    /// others' by id).
    pub fn user_of(&self, job: &Job) -> String {
        if job.user_id == self.user_id { self.username.clone() } else { job.user_id.to_string() }
    }
}

/// Who is signed in and the stations, kept for [`cache::LIFETIME`] beside the token file
/// (`FILE.slurm-site`): a workflow runs `sbatch` once a job, each asking both again otherwise.
/// Tied to the server and the refresh token by its SHA-256, so that another sign-in never finds
/// another's. A station made meanwhile is read afresh when named ([`Site::knowing_station`]); one
/// deleted fails a submission, which forgets the cache. Nothing in it is secret. A cache that
/// cannot be read or written is only a miss.
mod cache {
    use std::path::PathBuf;
    use std::time::Duration;

    use mission_client::{Client, Station, Uuid};
    use serde::{Deserialize, Serialize};

    /// How long the cache is used after it was written.
    pub const LIFETIME: Duration = Duration::from_secs(60);

    /// What the cache knows.
    #[derive(Serialize, Deserialize)]
    pub struct Known {
        pub user_id: Uuid,
        pub username: String,
        pub stations: Vec<Station>,
    }

    /// The file: what it knows, and the sign-in it knows it for.
    #[derive(Serialize, Deserialize)]
    struct Stored<K> {
        server: String,
        refresh_token_sha256: String,
        known: K,
    }

    /// The cache of one signed-in client: its file and what ties it to the sign-in.
    pub struct Key {
        path: PathBuf,
        server: String,
        refresh_token_sha256: String,
    }

    impl Key {
        /// The cache of `client` (none for a client without a refresh token).
        pub async fn of(client: &Client) -> Option<Self> {
            let tokens = client.tokens().await?;
            let mut path = crate::session::token_file().into_os_string();
            path.push(".slurm-site");
            Some(Self {
                path: path.into(),
                server: client.base_urls(),
                refresh_token_sha256: mission_client::auth::sha256_hex(&tokens.refresh_token),
            })
        }

        /// What the cache knows, if it was written for this sign-in less than [`LIFETIME`] ago.
        pub fn read(&self) -> Option<Known> {
            let age = std::fs::metadata(&self.path).ok()?.modified().ok()?.elapsed().ok()?;
            if age >= LIFETIME {
                return None;
            }
            let stored: Stored<Known> = serde_json::from_slice(&std::fs::read(&self.path).ok()?).ok()?;
            (stored.server == self.server && stored.refresh_token_sha256 == self.refresh_token_sha256)
                .then_some(stored.known)
        }

        /// Keeps `known` (unsynced: a cache lost in a crash is a miss).
        pub fn write(&self, known: &Known) {
            let stored =
                Stored { server: self.server.clone(), refresh_token_sha256: self.refresh_token_sha256.clone(), known };
            let bytes = serde_json::to_vec(&stored).expect("the cache serialises");
            let _ = mission_client::auth::token_file::write_private(&self.path, &bytes, false);
        }

        /// Removes the cache.
        pub fn forget(&self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
