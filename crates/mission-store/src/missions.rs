//! Missions.

use chrono::{DateTime, Utc};
use mission_api::Mission;
use sqlx::{Connection, QueryBuilder};
use uuid::Uuid;

use super::events::{NewEvent, commit_with_events, events_json};
use super::row::Columns;
use super::{
    MissionChanges, MissionFilter, Store, StoreError, push_any_of, push_labels, to_json, to_micros, with_conn,
};

/// Columns of `missions`, as [`mission_from_row`] reads them.
const MISSION_COLUMNS: &str = "mission_id, user_id, project_id, name, description, mission_type_id, \
    source_storage_id, destination_storage_id, source_path, destination_path, settings, args, \
    labels, retry, public, archived, created_at, updated_at, image";

impl Store {
    /// Stores a new mission.
    pub async fn insert_mission(&self, mission: &Mission) -> Result<(), StoreError> {
        self.insert_missions(std::slice::from_ref(mission)).await
    }

    /// The mission with this id, whoever owns it.
    pub async fn mission(&self, mission_id: Uuid) -> Result<Option<Mission>, StoreError> {
        with_conn!(self, reader, |conn| {
            let row = sqlx::query(&format!("SELECT {MISSION_COLUMNS} FROM missions WHERE mission_id = $1"))
                .bind(mission_id.to_string())
                .fetch_optional(conn)
                .await?;
            row.as_ref().map(mission_from_row).transpose()
        })
    }

    /// One page of missions matching `filter`, newest first, plus whether more follow.
    ///
    /// A user's view (own or public) without an id or name filter is the union of two
    /// index-ordered scans, each cut at the page's end: SQLite answers `user_id = ? OR public = 1`
    /// by collecting and sorting every visible row, which costs milliseconds at 100,000 missions.
    /// With an id or name filter the plain `OR` form is best, as the id or name index leaves a
    /// handful of rows (both plans measured by `cargo bench --bench missions_api`).
    pub async fn list_missions(&self, filter: &MissionFilter) -> Result<(Vec<Mission>, bool), StoreError> {
        let items = i64::from(filter.items);
        let offset = (i64::from(filter.page) - 1) * items;
        let public = format!("public = {}", self.sql_true());
        const ORDER: &str = " ORDER BY created_at DESC, mission_id DESC";
        with_conn!(self, reader, |conn: Db| {
            let rows = {
                let mut q: QueryBuilder<Db> = QueryBuilder::new(format!("SELECT {MISSION_COLUMNS} FROM "));
                let selective = !filter.mission_ids.is_empty() || !filter.names.is_empty();
                match filter.visible_to {
                    None => {
                        q.push("missions WHERE 1 = 1");
                        push_filters(&mut q, filter);
                    }
                    Some(viewer) if selective => {
                        q.push("missions WHERE (user_id = ")
                            .push_bind(viewer.to_string())
                            .push(format!(" OR {public})"));
                        push_filters(&mut q, filter);
                    }
                    Some(viewer) => {
                        let arm = |q: &mut QueryBuilder<Db>, own: bool| {
                            q.push(format!("(SELECT {MISSION_COLUMNS} FROM missions WHERE "));
                            if own {
                                q.push("user_id = ").push_bind(viewer.to_string());
                            } else {
                                q.push(&public);
                            }
                            push_filters(q, filter);
                            q.push(ORDER).push(" LIMIT ").push_bind(offset + items + 1).push(")");
                        };
                        q.push("(SELECT * FROM ");
                        arm(&mut q, true);
                        q.push(" AS own UNION SELECT * FROM ");
                        arm(&mut q, false);
                        q.push(" AS shared) AS visible");
                    }
                }
                q.push(ORDER).push(" LIMIT ").push_bind(items + 1).push(" OFFSET ").push_bind(offset);
                q.build().fetch_all(conn).await?
            };
            let has_more = rows.len() as i64 > items;
            let missions = rows.iter().take(filter.items as usize).map(mission_from_row).collect::<Result<_, _>>()?;
            Ok((missions, has_more))
        })
    }

    /// Applies `changes` to a mission and returns it as it now is (`None` when it is gone).
    pub async fn update_mission(
        &self,
        mission_id: Uuid,
        changes: &MissionChanges,
        now: DateTime<Utc>,
    ) -> Result<Option<Mission>, StoreError> {
        with_conn!(self, writer, |conn: Db| {
            let mut q: QueryBuilder<Db> = QueryBuilder::new("UPDATE missions SET updated_at = ");
            q.push_bind(to_micros(now));
            let mut set = |column: &str, value: Option<String>| {
                if let Some(v) = value {
                    q.push(format!(", {column} = ")).push_bind(v);
                }
            };
            set("name", changes.name.clone());
            set("description", changes.description.clone());
            set("source_storage_id", changes.source_storage_id.map(|u| u.to_string()));
            set("destination_storage_id", changes.destination_storage_id.map(|u| u.to_string()));
            set("source_path", changes.source_path.clone());
            set("destination_path", changes.destination_path.clone());
            set("settings", changes.settings.as_ref().map(to_json));
            set("args", changes.args.as_ref().map(to_json));
            set("labels", changes.labels.as_ref().map(to_json));
            set("retry", changes.retry.as_ref().map(to_json));
            set("project_id", changes.project_id.map(|u| u.to_string()));
            if let Some(image) = &changes.image {
                q.push(", image = ").push_bind(image.clone());
            }
            if let Some(archived) = changes.archived {
                q.push(", archived = ").push_bind(archived);
            }
            q.push(" WHERE mission_id = ").push_bind(mission_id.to_string());
            q.push(format!(" RETURNING {MISSION_COLUMNS}"));
            let mut tx = conn.begin().await?;
            let Some(row) = q.build().fetch_optional(&mut *tx).await? else { return Ok(None) };
            let mission = mission_from_row(&row)?;
            commit_with_events!(self, tx, events_json(&[NewEvent::mission("mission.updated", &mission, now)]));
            Ok(Some(mission))
        })
    }

    /// Deletes a mission, with its files' rows and its jobs' results index and logs (the files go
    /// with it); its jobs stay, with their history and usage (accounting and budgets count them).
    /// True when it existed.
    pub async fn delete_mission(&self, mission_id: Uuid) -> Result<bool, StoreError> {
        with_conn!(self, writer, |conn| {
            let mut tx = conn.begin().await?;
            let deleted = sqlx::query("DELETE FROM missions WHERE mission_id = $1 RETURNING user_id")
                .bind(mission_id.to_string())
                .fetch_optional(&mut *tx)
                .await?;
            let Some(row) = deleted else { return Ok(false) };
            let mut of_its_jobs = vec!["job_results"];
            // Replicas keep jobs' output in the database; one server, in files the server removes.
            of_its_jobs.extend(self.on_postgres().then_some("job_log_chunks"));
            for table in of_its_jobs {
                let sql =
                    format!("DELETE FROM {table} WHERE job_id IN (SELECT job_id FROM jobs WHERE mission_id = $1)");
                sqlx::query(&sql).bind(mission_id.to_string()).execute(&mut *tx).await?;
            }
            let owner = row.uuid("user_id")?;
            commit_with_events!(self, tx, events_json(&[NewEvent::mission_deleted(mission_id, owner, super::now())]));
            Ok(true)
        })
    }

    /// Inserts many missions in one transaction (benchmarks and imports).
    pub async fn insert_missions(&self, missions: &[Mission]) -> Result<(), StoreError> {
        let sql = format!(
            "INSERT INTO missions ({MISSION_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)"
        );
        with_conn!(self, writer, |conn| {
            let mut tx = conn.begin().await?;
            for m in missions {
                sqlx::query(&sql)
                    .bind(m.mission_id.to_string())
                    .bind(m.user_id.to_string())
                    .bind(m.project_id.to_string())
                    .bind(&m.name)
                    .bind(&m.description)
                    .bind(m.mission_type_id.map(|u| u.to_string()))
                    .bind(m.source_storage_id.map(|u| u.to_string()))
                    .bind(m.destination_storage_id.map(|u| u.to_string()))
                    .bind(&m.source_path)
                    .bind(&m.destination_path)
                    .bind(to_json(&m.settings))
                    .bind(to_json(&m.args))
                    .bind(to_json(&m.labels))
                    .bind(m.retry.as_ref().map(to_json))
                    .bind(m.public)
                    .bind(m.archived)
                    .bind(to_micros(m.created_at))
                    .bind(to_micros(m.updated_at))
                    .bind(&m.image)
                    .execute(&mut *tx)
                    .await?;
            }
            let created: Vec<NewEvent> =
                missions.iter().map(|m| NewEvent::mission("mission.created", m, m.created_at)).collect();
            commit_with_events!(self, tx, events_json(&created));
        });
        Ok(())
    }
}

/// Appends the list filters other than visibility as `AND …` terms.
fn push_filters<'q, DB>(q: &mut QueryBuilder<'q, DB>, filter: &MissionFilter)
where
    DB: sqlx::Database,
    String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    bool: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    push_any_of(q, "mission_id", filter.mission_ids.iter().map(Uuid::to_string));
    push_any_of(q, "name", filter.names.iter().cloned());
    push_any_of(q, "user_id", filter.user_ids.iter().map(Uuid::to_string));
    push_any_of(q, "project_id", filter.project_ids.iter().map(Uuid::to_string));
    push_any_of(q, "mission_type_id", filter.mission_type_ids.iter().map(Uuid::to_string));
    push_labels(q, &filter.labels);
    if let Some(archived) = filter.archived {
        q.push(" AND archived = ").push_bind(archived);
    }
    if let Some(text) = &filter.name_contains {
        let escaped: String = text
            .to_lowercase()
            .chars()
            .flat_map(|c| if matches!(c, '%' | '_' | '\\') { vec!['\\', c] } else { vec![c] })
            .collect();
        q.push(" AND LOWER(name) LIKE ").push_bind(format!("%{escaped}%")).push(" ESCAPE '\\'");
    }
}

fn mission_from_row(r: &impl Columns) -> Result<Mission, StoreError> {
    Ok(Mission {
        mission_id: r.uuid("mission_id")?,
        user_id: r.uuid("user_id")?,
        project_id: r.uuid("project_id")?,
        name: r.text("name")?,
        description: r.text("description")?,
        mission_type_id: r.opt_uuid("mission_type_id")?,
        source_storage_id: r.opt_uuid("source_storage_id")?,
        destination_storage_id: r.opt_uuid("destination_storage_id")?,
        source_path: r.opt_text("source_path")?,
        destination_path: r.opt_text("destination_path")?,
        settings: r.json("settings")?,
        args: r.json("args")?,
        labels: r.json("labels")?,
        retry: r.opt_json("retry")?,
        image: r.opt_text("image")?,
        public: r.flag("public")?,
        archived: r.flag("archived")?,
        created_at: r.time("created_at")?,
        updated_at: r.time("updated_at")?,
    })
}
