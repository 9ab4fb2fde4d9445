//! The missions pages: the paged, searchable list and one mission with its files as a tree.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use mission_api::{FileListing, Mission};
use serde::Deserialize;

use super::session::Viewer;
use super::{Frame, PageResult, file_href, page, query_value};
use crate::AppState;
use crate::domain::catalogue;
use crate::domain::{files, missions};
use crate::http::routes::extract::parse_id;

/// Missions per page of the list.
const PAGE_SIZE: u32 = 25;

/// A mission as a row of the list.
struct Row {
    mission: Mission,
    type_name: String,
    own: bool,
}

impl Row {
    fn new(mission: Mission, viewer: &Viewer) -> Self {
        let type_name =
            mission.mission_type_id.and_then(catalogue::find).map_or_else(|| "—".to_owned(), |t| t.summary().name);
        let own = mission.user_id == viewer.user.user_id;
        Self { mission, type_name, own }
    }
}

#[derive(Template)]
#[template(path = "console/missions.html")]
struct MissionsPage {
    frame: Frame,
    rows: Vec<Row>,
    search: String,
    archived: String,
    owner: String,
    page: u32,
    previous: Option<String>,
    next: Option<String>,
}

#[derive(Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    q: String,
    /// `no` (the default), `yes` or `all`.
    #[serde(default)]
    archived: String,
    /// `all` (the default) or `mine`.
    #[serde(default)]
    owner: String,
    page: Option<u32>,
}

/// `GET /missions`: the missions the viewer may see, newest first, 25 a page.
pub async fn list(State(app): State<AppState>, viewer: Viewer, Query(query): Query<ListQuery>) -> PageResult {
    let page_number = query.page.unwrap_or(1).max(1);
    let mut pairs = vec![("page".to_owned(), page_number.to_string()), ("items".to_owned(), PAGE_SIZE.to_string())];
    let search = query.q.trim().to_owned();
    if !search.is_empty() {
        pairs.push(("search".into(), search.clone()));
    }
    let archived = match query.archived.as_str() {
        "yes" | "all" => query.archived.clone(),
        _ => "no".to_owned(),
    };
    match archived.as_str() {
        "yes" => pairs.push(("archived".into(), "true".into())),
        "no" => pairs.push(("archived".into(), "false".into())),
        _ => {}
    }
    let owner = if query.owner == "mine" { "mine" } else { "all" }.to_owned();
    if owner == "mine" {
        pairs.push(("user_ids".into(), viewer.user.user_id.to_string()));
    }
    let filter = crate::http::routes::missions::mission_filter(&pairs)?;
    let (missions, has_more) = missions::list(&app, viewer.principal(), filter).await?;
    let link = |n: u32| format!("/missions?q={}&archived={archived}&owner={owner}&page={n}", query_value(&search));
    let template = MissionsPage {
        frame: Frame::new(&viewer, "missions"),
        rows: missions.into_iter().map(|m| Row::new(m, &viewer)).collect(),
        previous: (page_number > 1).then(|| link(page_number - 1)),
        next: has_more.then(|| link(page_number + 1)),
        search,
        archived,
        owner,
        page: page_number,
    };
    Ok(page(StatusCode::OK, &template))
}

/// One line of a mission's file tree: a folder opening, a file, or a folder closing.
enum TreeLine {
    Open { name: String },
    File { name: String, path: String, size: String, modified: DateTime<Utc>, href: String },
    Close,
}

/// The tree of `listing` (any order), as lines to render top to bottom.
fn tree(mission_id: uuid::Uuid, listing: &[FileListing]) -> Vec<TreeLine> {
    let mut files: Vec<&FileListing> = listing.iter().collect();
    files.sort_by_key(|f| f.relative_path());
    let mut lines = Vec::new();
    let mut open: Vec<&str> = Vec::new();
    for file in files {
        let folders: Vec<&str> = if file.path.is_empty() { Vec::new() } else { file.path.split('/').collect() };
        let shared = open.iter().zip(&folders).take_while(|(a, b)| a == b).count();
        for _ in shared..open.len() {
            lines.push(TreeLine::Close);
        }
        open.truncate(shared);
        for folder in &folders[shared..] {
            lines.push(TreeLine::Open { name: (*folder).to_owned() });
            open.push(folder);
        }
        lines.push(TreeLine::File {
            name: file.filename.clone(),
            path: file.relative_path(),
            size: human_size(file.file_size),
            modified: file.modified_at,
            href: file_href(&format!("/api/v1/missions/{mission_id}/files"), &file.relative_path()),
        });
    }
    lines.extend(open.iter().map(|_| TreeLine::Close));
    lines
}

/// Bytes for people: `812 B`, `1.4 MB`.
pub fn human_size(bytes: u64) -> String {
    let mut value = bytes as f64;
    for unit in ["B", "KB", "MB", "GB", "TB"] {
        if value < 1000.0 || unit == "TB" {
            return if unit == "B" { format!("{bytes} B") } else { format!("{value:.1} {unit}") };
        }
        value /= 1000.0;
    }
    unreachable!("the loop returns at TB")
}

#[derive(Template)]
#[template(path = "console/mission.html")]
struct MissionPageView {
    frame: Frame,
    mission: Mission,
    type_name: String,
    own: bool,
    lines: Vec<TreeLine>,
    files: usize,
    total: String,
}

/// `GET /missions/{id}`: a mission, its settings and its files.
pub async fn show(State(app): State<AppState>, viewer: Viewer, Path(id): Path<String>) -> PageResult {
    let mission = missions::readable(&app, viewer.principal(), parse_id("mission_id", &id)?).await?;
    let listing = files::list(&app, viewer.principal(), parse_id("mission_id", &id)?).await?;
    let row = Row::new(mission, &viewer);
    let template = MissionPageView {
        frame: Frame::new(&viewer, "missions"),
        lines: tree(row.mission.mission_id, &listing),
        files: listing.len(),
        total: human_size(listing.iter().map(|f| f.file_size).sum()),
        type_name: row.type_name,
        own: row.own,
        mission: row.mission,
    };
    Ok(page(StatusCode::OK, &template))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, name: &str) -> FileListing {
        FileListing {
            filename: name.into(),
            name: name.into(),
            path: path.into(),
            file_size: 1,
            modified_at: Utc::now(),
            sha256: String::new(),
        }
    }

    fn shape(lines: &[TreeLine]) -> String {
        lines
            .iter()
            .map(|l| match l {
                TreeLine::Open { name } => format!("{name}/"),
                TreeLine::File { name, .. } => name.clone(),
                TreeLine::Close => "^".into(),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn files_become_a_tree_of_folders() {
        let listing = [
            file("data/raw", "b.csv"),
            file("", "run.sh"),
            file("data", "a.txt"),
            file("data/raw", "a.csv"),
            file("out", "x"),
        ];
        let lines = tree(uuid::Uuid::nil(), &listing);
        assert_eq!(shape(&lines), "data/ a.txt raw/ a.csv b.csv ^ ^ out/ x ^ run.sh");
    }

    #[test]
    fn file_links_encode_each_segment() {
        let lines = tree(uuid::Uuid::nil(), &[file("a b", "ü?#.txt")]);
        let TreeLine::File { href, .. } = &lines[1] else { panic!("a file") };
        assert_eq!(href, "/api/v1/missions/00000000-0000-0000-0000-000000000000/files/a%20b/%C3%BC%3F%23.txt");
    }

    #[test]
    fn sizes_read_as_people_say_them() {
        assert_eq!(human_size(812), "812 B");
        assert_eq!(human_size(1_400_000), "1.4 MB");
        assert_eq!(human_size(3_000_000_000_000_000), "3000.0 TB");
    }
}
