//! Mission operations of spec §4: list, get, create, update, update arguments, delete.

use mission_api::{CreateMission, Mission, MissionPage, UpdateMission};
use reqwest::Method;
use uuid::Uuid;

use crate::client::check;
use crate::{Client, Error};

/// Filters and paging of [`Client::list_missions`]; `Default` is the spec's defaults (page 1,
/// 25 items, no filters).
///
/// ```
/// let options = mission_client::ListMissions { names: vec!["nightly".into()], ..Default::default() };
/// assert_eq!((options.page, options.items), (1, 25));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListMissions {
    /// Only these missions.
    pub mission_ids: Vec<Uuid>,
    /// Only missions with one of these exact names.
    pub names: Vec<String>,
    /// Only missions of these owners.
    pub user_ids: Vec<Uuid>,
    /// Only missions of these projects of the caller's: every one of theirs, whoever owns it.
    pub project_ids: Vec<Uuid>,
    /// Page number, from 1.
    pub page: u32,
    /// Missions per page, 1 to [`mission_api::MAX_ITEMS_PER_PAGE`].
    pub items: u32,
    /// Only missions of these types.
    pub mission_type_ids: Vec<Uuid>,
    /// Only archived (`Some(true)`) or unarchived (`Some(false)`) missions.
    pub archived: Option<bool>,
    /// Only missions with every one of these labels (`key`, `value`).
    pub labels: Vec<(String, String)>,
}

impl Default for ListMissions {
    fn default() -> Self {
        Self {
            mission_ids: Vec::new(),
            names: Vec::new(),
            user_ids: Vec::new(),
            project_ids: Vec::new(),
            page: 1,
            items: 25,
            mission_type_ids: Vec::new(),
            archived: None,
            labels: Vec::new(),
        }
    }
}

impl ListMissions {
    fn query(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        q.extend(self.mission_ids.iter().map(|id| ("ids", id.to_string())));
        q.extend(self.names.iter().map(|n| ("names", n.clone())));
        q.extend(self.user_ids.iter().map(|id| ("user_ids", id.to_string())));
        q.extend(self.project_ids.iter().map(|id| ("project_ids", id.to_string())));
        q.extend(self.mission_type_ids.iter().map(|id| ("mission_type_ids", id.to_string())));
        if let Some(archived) = self.archived {
            q.push(("archived", archived.to_string()));
        }
        q.extend(self.labels.iter().map(|(key, value)| ("label", format!("{key}={value}"))));
        q.push(("page", self.page.to_string()));
        q.push(("items", self.items.to_string()));
        q
    }
}

impl Client {
    /// The missions the caller may read (own and public), newest first, one page.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client) -> Result<(), mission_client::Error> {
    /// for m in client.list_missions(&Default::default()).await? {
    ///     println!("{} {}", m.mission_id, m.name);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_missions(&self, options: &ListMissions) -> Result<Vec<Mission>, Error> {
        Ok(self.list_missions_page(options).await?.missions)
    }

    /// Like [`Client::list_missions`], with the paging information (`has_more`).
    pub async fn list_missions_page(&self, options: &ListMissions) -> Result<MissionPage, Error> {
        self.get_json("/missions", &options.query()).await
    }

    /// One mission; [`Error::NotFound`] when it does not exist or is someone else's and private.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client, id: uuid::Uuid) -> Result<(), mission_client::Error> {
    /// let mission = client.get_mission_by_id(id).await?;
    /// println!("{} has settings {:?}", mission.name, mission.settings);
    /// # Ok(()) }
    /// ```
    pub async fn get_mission_by_id(&self, mission_id: Uuid) -> Result<Mission, Error> {
        self.get_json(&format!("/missions/{mission_id}"), &[]).await
    }

    /// Creates a mission owned by the caller.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client) -> Result<(), mission_client::Error> {
    /// use mission_client::CreateMission;
    /// let mission = client
    ///     .create_mission(&CreateMission { name: "climate run".into(), ..Default::default() })
    ///     .await?;
    /// assert!(!mission.public);
    /// # Ok(()) }
    /// ```
    pub async fn create_mission(&self, request: &CreateMission) -> Result<Mission, Error> {
        self.send_json(Method::POST, "/missions", request).await
    }

    /// Changes the fields set in `changes`; `Ok(false)` when the mission does not exist (or is
    /// not visible), an error for anything else, such as an invalid setting.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client, id: uuid::Uuid) -> Result<(), mission_client::Error> {
    /// use mission_client::UpdateMission;
    /// let changed = client
    ///     .update_mission(id, &UpdateMission { description: Some("v2".into()), ..Default::default() })
    ///     .await?;
    /// assert!(changed);
    /// # Ok(()) }
    /// ```
    pub async fn update_mission(&self, mission_id: Uuid, changes: &UpdateMission) -> Result<bool, Error> {
        match self.send_json::<Mission>(Method::PATCH, &format!("/missions/{mission_id}"), changes).await {
            Ok(_) => Ok(true),
            Err(Error::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Replaces a mission's labels; answers the mission.
    pub async fn set_mission_labels(&self, mission_id: Uuid, labels: &crate::Labels) -> Result<Mission, Error> {
        let update = UpdateMission { labels: Some(labels.clone()), ..Default::default() };
        self.send_json(Method::PATCH, &format!("/missions/{mission_id}"), &update).await
    }

    /// Replaces the mission's arguments and returns the mission as stored.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client, id: uuid::Uuid) -> Result<(), mission_client::Error> {
    /// let mission = client.update_mission_args(id, &["--steps".into(), "100".into()]).await?;
    /// assert_eq!(mission.args, ["--steps", "100"]);
    /// # Ok(()) }
    /// ```
    pub async fn update_mission_args(&self, mission_id: Uuid, args: &[String]) -> Result<Mission, Error> {
        let update = UpdateMission { args: Some(args.to_vec()), ..Default::default() };
        self.send_json(Method::PATCH, &format!("/missions/{mission_id}"), &update).await
    }

    /// Deletes the mission; [`Error::NotFound`] when there is none.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client, id: uuid::Uuid) -> Result<(), mission_client::Error> {
    /// client.delete_mission_by_id(id).await?;
    /// # Ok(()) }
    /// ```
    pub async fn delete_mission_by_id(&self, mission_id: Uuid) -> Result<(), Error> {
        check(self.send(&format!("/missions/{mission_id}"), |http, url| http.delete(url)).await?).await?;
        Ok(())
    }
}
