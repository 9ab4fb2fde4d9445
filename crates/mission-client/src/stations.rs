//! Stations and their landing zones: list, create, delete, members, LZ registration.

use mission_api::{
    CreateStation, LandingZone, RegisterLandingZone, RegisteredLandingZone, Station, StationMember, UpdateStation,
};
use reqwest::Method;
use uuid::Uuid;

use mission_api::paths::encode_segment;

use crate::client::check;
use crate::{Client, Error};

impl Client {
    /// The stations the caller may run jobs on (every station, for an admin).
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client) -> Result<(), mission_client::Error> {
    /// for station in client.list_stations().await? {
    ///     println!("{} {}", station.station_id, station.name);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_stations(&self) -> Result<Vec<Station>, Error> {
        self.get_json("/stations", &[]).await
    }

    /// One station; [`Error::NotFound`] when it does not exist or the caller may not use it.
    pub async fn get_station(&self, station_id: Uuid) -> Result<Station, Error> {
        self.get_json(&format!("/stations/{station_id}"), &[]).await
    }

    /// Creates a station (admins only).
    pub async fn create_station(&self, request: &CreateStation) -> Result<Station, Error> {
        self.send_json(Method::POST, "/stations", request).await
    }

    /// Changes a station's description, access or reclaiming (its owner or an admin); answers
    /// the station as it is now.
    pub async fn update_station(&self, station_id: Uuid, update: &UpdateStation) -> Result<Station, Error> {
        self.send_json(Method::PATCH, &format!("/stations/{station_id}"), update).await
    }

    /// Deletes a station with its members and landing zones (admins only); `Ok(false)` when
    /// there is no such station.
    pub async fn delete_station(&self, station_id: Uuid) -> Result<bool, Error> {
        self.delete_found(&format!("/stations/{station_id}")).await
    }

    /// The members of a station (its owner and admins may ask).
    pub async fn station_members(&self, station_id: Uuid) -> Result<Vec<StationMember>, Error> {
        self.get_json(&format!("/stations/{station_id}/members"), &[]).await
    }

    /// Adds a member by user id or username.
    pub async fn add_station_member(&self, station_id: Uuid, user: &str) -> Result<(), Error> {
        let path = format!("/stations/{station_id}/members/{}", encode_segment(user));
        check(self.send(&path, |http, url| http.put(url)).await?).await?;
        Ok(())
    }

    /// Removes a member; `Ok(false)` when they were not one.
    pub async fn remove_station_member(&self, station_id: Uuid, user: &str) -> Result<bool, Error> {
        self.delete_found(&format!("/stations/{station_id}/members/{}", encode_segment(user))).await
    }

    /// The landing zones of a station.
    pub async fn list_landing_zones(&self, station_id: Uuid) -> Result<Vec<LandingZone>, Error> {
        self.get_json(&format!("/stations/{station_id}/lzs"), &[]).await
    }

    /// Registers a landing zone; the answer holds the agent token, shown this once.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client, station: uuid::Uuid) -> Result<(), mission_client::Error> {
    /// use mission_client::RegisterLandingZone;
    /// let lz = client.register_landing_zone(station, &RegisterLandingZone { name: "gpu-01".into(), cluster_account: None }).await?;
    /// println!("mission lz --server URL --token {}", lz.token);
    /// # Ok(()) }
    /// ```
    pub async fn register_landing_zone(
        &self,
        station_id: Uuid,
        request: &RegisterLandingZone,
    ) -> Result<RegisteredLandingZone, Error> {
        self.send_json(Method::POST, &format!("/stations/{station_id}/lzs"), request).await
    }

    /// Removes a landing zone; `Ok(false)` when the station has no such LZ.
    pub async fn remove_landing_zone(&self, station_id: Uuid, lz_id: Uuid) -> Result<bool, Error> {
        self.delete_found(&format!("/stations/{station_id}/lzs/{lz_id}")).await
    }
}
