// Mission Compute console: the little the pages need beyond HTML. No library; loaded with
// `defer` from this server only (the Content-Security-Policy allows nothing else).
"use strict";

// Times are rendered in UTC on the server; show them in the reader's own time zone.
function localTimes(root) {
  const format = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
  for (const element of root.querySelectorAll("time[datetime]")) {
    const when = new Date(element.getAttribute("datetime"));
    if (!Number.isNaN(when.getTime())) {
      element.title = element.textContent;
      element.textContent = format.format(when);
    }
  }
}

// Forms that destroy something ask first: <form data-confirm="Delete this mission?">.
function confirmations(root) {
  for (const form of root.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
}

// A GET of the API with the session cookie; a 401 (the session ended) sends the reader to sign
// in, and back here afterwards.
async function api(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  if (response.status === 401) {
    const here = window.location.pathname + window.location.search;
    window.location.assign(`/sign-in?next=${encodeURIComponent(here)}`);
    return null;
  }
  return response.ok ? response.json() : null;
}

// A live stream broke: if the session has ended, go and sign in (an EventSource cannot say why
// it failed); otherwise it reconnects by itself.
function checkSession() {
  api("/api/v1/me");
}

// The jobs list stays current: GET /api/v1/jobs/events sends each job of the list's filters as
// it changes. A known row gets its new state; a new job joins the top of page 1 (when it passes
// the status filter); a "resync" (changes were missed) reloads the page.
function liveJobs(table) {
  const state = document.getElementById("live-state");
  const events = new EventSource(table.dataset.events);
  events.addEventListener("open", () => { state.textContent = "live"; });
  events.addEventListener("error", () => { state.textContent = "reconnecting…"; checkSession(); });
  events.addEventListener("resync", () => window.location.reload());
  events.addEventListener("job", (event) => {
    const job = JSON.parse(event.data);
    const row = table.querySelector(`tr[data-job="${job.job_id}"]`);
    if (row) {
      setState(row.querySelector(".state"), job.status);
    } else if (table.dataset.page === "1" && (!table.dataset.status || table.dataset.status === job.status)) {
      table.tBodies[0].prepend(jobRow(job));
      const empty = document.getElementById("no-jobs");
      if (empty) empty.remove();
    }
  });
}

function setState(element, status) {
  element.textContent = status;
  element.className = `state state-${status}`;
}

// A row for a job the page did not have, built from text (never from markup).
function jobRow(job) {
  const row = document.createElement("tr");
  row.dataset.job = job.job_id;
  const cell = (child) => { const td = document.createElement("td"); td.append(child); row.append(td); return td; };
  const link = (href, text) => { const a = document.createElement("a"); a.href = href; a.textContent = text; return a; };
  cell(link(`/jobs/${job.job_id}`, job.job_id.slice(0, 8)));
  const mission = link(`/missions/${job.mission_id}`, "mission");
  cell(mission);
  api(`/api/v1/missions/${job.mission_id}`).then((found) => { if (found) mission.textContent = found.name; });
  const badge = document.createElement("span");
  setState(badge, job.status);
  cell(badge).className = "status";
  const gpus = job.gpu_count > 0 ? ` · ${job.gpu_count} GPU` : "";
  cell(`${job.cpu_count} CPU · ${job.memory_amount} MB${gpus}`);
  const time = document.createElement("time");
  time.setAttribute("datetime", job.created_at);
  time.textContent = job.created_at;
  cell(time);
  localTimes(row);
  return row;
}

// A running job's page: its logs grow as they are written, its state follows the job, and once
// the job has ended the page is read again to show the results.
function liveJob(header) {
  const jobId = header.dataset.job;
  let open = 0;
  for (const pre of document.querySelectorAll("pre.log[data-follow]")) {
    open += 1;
    const stream = new EventSource(pre.dataset.follow);
    // Each connection sends the log from its start: after a reconnection, start over.
    stream.addEventListener("open", () => { pre.textContent = ""; });
    stream.addEventListener("message", (event) => {
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.append(JSON.parse(event.data));
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    });
    stream.addEventListener("end", () => {
      stream.close();
      open -= 1;
      if (open === 0) window.location.reload();
    });
  }
  const events = new EventSource("/api/v1/jobs/events");
  events.addEventListener("error", checkSession);
  events.addEventListener("job", (event) => {
    const job = JSON.parse(event.data);
    if (job.job_id === jobId) setState(document.getElementById("job-status"), job.status);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  localTimes(document);
  confirmations(document);
  const jobs = document.querySelector("table#jobs[data-events]");
  if (jobs) liveJobs(jobs);
  const job = document.querySelector('#job[data-finished="false"]');
  if (job) liveJob(job);
});
