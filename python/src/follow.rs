//! Following a job's log from Python: [`LogFollower`] is an iterator over the pieces of output,
//! each `__next__` a blocking read of the SDK's [`LogFollow`].

use std::sync::Mutex;

use mission_client::{LogEvent, LogFollow};
use pyo3::prelude::*;

use crate::block_on;

/// A job's output as it is written (`mission.LogFollow`): iterate for the pieces; when the job
/// ends the iteration stops, and `status` holds its final status.
#[pyclass(module = "mission._native", frozen)]
pub struct LogFollower {
    follow: tokio::sync::Mutex<LogFollow>,
    status: Mutex<Option<String>>,
}

impl LogFollower {
    pub fn new(follow: LogFollow) -> Self {
        Self { follow: tokio::sync::Mutex::new(follow), status: Mutex::new(None) }
    }
}

#[pymethods]
impl LogFollower {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<String>> {
        let event = block_on(py, async { self.follow.lock().await.next().await })?;
        match event {
            LogEvent::Output(text) => Ok(Some(text)),
            LogEvent::End(status) => {
                *self.status.lock().expect("the status") = Some(status.as_str().to_owned());
                Ok(None)
            }
        }
    }

    /// The job's final status once the follow has ended, else `None`.
    #[getter]
    fn status(&self) -> Option<String> {
        self.status.lock().expect("the status").clone()
    }
}
