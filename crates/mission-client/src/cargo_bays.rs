//! Cargo bays: list, add, read, delete the storage locations missions name in
//! `source_storage_id` and `destination_storage_id`.

use mission_api::{CargoBay, CreateCargoBay};
use reqwest::Method;
use uuid::Uuid;

use crate::{Client, Error};

impl Client {
    /// The server's default bay followed by the caller's bays (every bay, for an admin).
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client) -> Result<(), mission_client::Error> {
    /// for bay in client.list_cargo_bays().await? {
    ///     println!("{} {} {}", bay.storage_id, bay.kind, bay.name);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_cargo_bays(&self) -> Result<Vec<CargoBay>, Error> {
        self.get_json("/cargo-bays", &[]).await
    }

    /// One bay; [`Error::NotFound`] when it does not exist or is not the caller's.
    pub async fn get_cargo_bay(&self, storage_id: Uuid) -> Result<CargoBay, Error> {
        self.get_json(&format!("/cargo-bays/{storage_id}"), &[]).await
    }

    /// Adds a bay. The server lists the bucket (or directory) first, so wrong credentials or a
    /// missing bucket fail here with [`Error::Api`] saying so. The secrets sent are stored
    /// encrypted and never returned.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client) -> Result<(), mission_client::Error> {
    /// use mission_client::{CargoBayKind, CreateCargoBay, CreateMission};
    /// let bay = client
    ///     .create_cargo_bay(&CreateCargoBay {
    ///         bucket: Some("lab-data".into()),
    ///         prefix: Some("runs".into()),
    ///         region: Some("eu-west-1".into()),
    ///         access_key_id: Some("AKIA…".into()),
    ///         secret_access_key: Some(std::env::var("LAB_SECRET").unwrap()),
    ///         ..CreateCargoBay::new("lab bucket", CargoBayKind::S3)
    ///     })
    ///     .await?;
    /// let mission = client
    ///     .create_mission(&CreateMission {
    ///         name: "from S3".into(),
    ///         source_storage_id: Some(bay.storage_id),
    ///         source_path: Some("2026/run-7".into()),
    ///         ..Default::default()
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn create_cargo_bay(&self, request: &CreateCargoBay) -> Result<CargoBay, Error> {
        self.send_json(Method::POST, "/cargo-bays", request).await
    }

    /// Deletes a bay; `Ok(false)` when there is no such bay of the caller's. A bay that missions
    /// still name is not deleted ([`Error::Api`] with status 409). The bucket's objects stay.
    pub async fn delete_cargo_bay(&self, storage_id: Uuid) -> Result<bool, Error> {
        self.delete_found(&format!("/cargo-bays/{storage_id}")).await
    }
}
