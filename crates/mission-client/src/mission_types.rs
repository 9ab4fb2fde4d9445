//! Mission-type operations of spec §4: list, get, settings information.

use std::collections::BTreeMap;

use mission_api::{MissionType, MissionTypeSummary};
use uuid::Uuid;

use crate::{Client, Error};

impl Client {
    /// The mission types of the server's catalogue.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client) -> Result<(), mission_client::Error> {
    /// let python = client.list_mission_types().await?.into_iter().find(|t| t.name == "python");
    /// # Ok(()) }
    /// ```
    pub async fn list_mission_types(&self) -> Result<Vec<MissionTypeSummary>, Error> {
        self.get_json("/mission-types", &[]).await
    }

    /// One mission type in detail (settings, command template, resource defaults).
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client, id: uuid::Uuid) -> Result<(), mission_client::Error> {
    /// let t = client.get_mission_type(id).await?;
    /// println!("{} {} runs {:?}", t.name, t.version, t.command);
    /// # Ok(()) }
    /// ```
    pub async fn get_mission_type(&self, mission_type_id: Uuid) -> Result<MissionType, Error> {
        self.get_json(&format!("/mission-types/{mission_type_id}"), &[]).await
    }

    /// Setting name to expected type or options: the settings to give a mission of this type.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client, id: uuid::Uuid) -> Result<(), mission_client::Error> {
    /// for (name, expected) in client.get_mission_type_settings_info(id).await? {
    ///     println!("{name}: {expected}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn get_mission_type_settings_info(
        &self,
        mission_type_id: Uuid,
    ) -> Result<BTreeMap<String, String>, Error> {
        self.get_json(&format!("/mission-types/{mission_type_id}/settings"), &[]).await
    }
}
