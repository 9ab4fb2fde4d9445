//! Container images: import an archive (as `podman save` or `docker save` writes it) for
//! missions' jobs to run in, list, read and delete them. See [`mission_api::images`].

use std::path::Path;
use std::sync::Arc;

use futures_util::TryStreamExt;
use mission_api::{Image, ImportImage, RegisterImageReference};
use uuid::Uuid;

use crate::client::read_json;
use crate::files::io_error;
use crate::{Client, Error, TransferObserver};

impl Client {
    /// Imports the archive at `archive` as an image, streamed (memory stays flat however large
    /// it is); `observer` hears of the bytes as they go.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client) -> Result<(), mission_client::Error> {
    /// use mission_client::ImportImage;
    /// let request = ImportImage { name: "solver:2.1".into(), ..Default::default() };
    /// let image = client.import_image(std::path::Path::new("solver.tar"), &request, None).await?;
    /// println!("{} {}", image.name, image.digest);
    /// # Ok(()) }
    /// ```
    pub async fn import_image(
        &self,
        archive: &Path,
        request: &ImportImage,
        observer: Option<Arc<dyn TransferObserver>>,
    ) -> Result<Image, Error> {
        // A refusal the server gives before it reads the body (a taken name) would reach the
        // client as a broken connection while it still sends: ask first.
        let me = self.whoami().await?.user_id;
        if self.list_images().await?.iter().any(|i| i.owner_id == me && i.name == request.name) {
            return Err(Error::Api(mission_api::Problem {
                kind: "urn:mission:problem:conflict".into(),
                title: "Conflict".into(),
                status: 409,
                detail: format!("you have an image named {:?} already", request.name),
                field: Some("name".into()),
            }));
        }
        let file = tokio::fs::File::open(archive).await.map_err(|e| io_error(archive, e))?;
        let size = file.metadata().await.map_err(|e| io_error(archive, e))?.len();
        if let Some(o) = &observer {
            o.start(1, size);
        }
        let progress = observer.clone();
        let stream = tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024).inspect_ok(move |chunk| {
            if let Some(o) = &progress {
                o.bytes(chunk.len() as u64);
            }
        });
        let mut query = vec![("name", request.name.clone()), ("visibility", request.visibility.to_string())];
        query.extend(request.project_id.map(|id| ("project_id", id.to_string())));
        let response = self
            .send_once("/images", |http, url| {
                http.post(url)
                    .query(&query)
                    .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                    .header(reqwest::header::CONTENT_LENGTH, size)
                    .body(reqwest::Body::wrap_stream(stream))
            })
            .await?;
        let image: Image = read_json(response).await?;
        if let Some(o) = &observer {
            o.file_done(&archive.to_string_lossy(), size, false);
        }
        Ok(image)
    }

    /// Registers an image that landing zones pull from a container registry, pinned by digest
    /// (`HOST[:PORT]/PATH[:TAG]@sha256:HEX`).
    pub async fn register_image_reference(&self, request: &RegisterImageReference) -> Result<Image, Error> {
        self.send_json(reqwest::Method::POST, "/images/references", request).await
    }

    /// The images the caller sees (every one, for an admin), by name.
    pub async fn list_images(&self) -> Result<Vec<Image>, Error> {
        self.get_json("/images", &[]).await
    }

    /// One image; [`Error::NotFound`] when there is none the caller sees.
    pub async fn get_image(&self, image_id: Uuid) -> Result<Image, Error> {
        self.get_json(&format!("/images/{image_id}"), &[]).await
    }

    /// Deletes an image of the caller's (any, for an admin); `Ok(false)` when there is no such
    /// image the caller sees.
    pub async fn delete_image(&self, image_id: Uuid) -> Result<bool, Error> {
        self.delete_found(&format!("/images/{image_id}")).await
    }
}
