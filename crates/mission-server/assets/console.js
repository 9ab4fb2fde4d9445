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
// the status filter).
function liveJobs(table) {
  const state = document.getElementById("live-state");
  const events = new EventSource(table.dataset.events);
  events.addEventListener("open", () => { state.textContent = "live"; });
  events.addEventListener("error", () => { state.textContent = "reconnecting…"; checkSession(); });
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
  // The station filter lists every station the viewer may use, by name.
  const station = document.querySelector(`#station option[value="${job.station_id}"]`);
  cell(link(`/stations/${job.station_id}`, station ? station.textContent : job.station_id.slice(0, 8)));
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
    if (job.job_id !== jobId) return;
    setState(document.getElementById("job-status"), job.status);
    // Its owner's buttons (Terminal, Open) come with the page of a running job.
    if (job.status === "running" && header.dataset.own === "true" && header.dataset.status !== "running") {
      window.location.reload();
    }
  });
  // A session that is starting gets its Open button once its app answers.
  if (document.querySelector("#job-session[data-starting]") && header.dataset.own === "true") {
    const timer = setInterval(async () => {
      const answer = await fetch(`/api/v1/jobs/${jobId}`);
      if (!answer.ok) return;
      const job = await answer.json();
      if (job.session && job.session.url) {
        clearInterval(timer);
        window.location.reload();
      }
    }, 2000);
  }
}

// A form marked data-autosubmit (the mission-type choice) goes as soon as a choice is made; its
// button is there for readers without script.
function autosubmit(root) {
  for (const form of root.querySelectorAll("form[data-autosubmit]")) {
    form.addEventListener("change", () => form.submit());
  }
}

// The session's CSRF token, which every state-changing API request of the console carries.
function csrfToken() {
  return document.querySelector('meta[name="csrf-token"]').content;
}

// A mission path as a URL path: each segment encoded.
function encodePath(path) {
  return path.split("/").map(encodeURIComponent).join("/");
}

// Uploads to a mission: files or whole folders, chosen or dropped, three at a time, each streamed
// as the body of PUT /api/v1/missions/{id}/files/{path}, with a bar for each file and one for all.
// When every file has gone the page is read again to show the new tree; failures stay listed.
function uploads(section) {
  const mission = section.dataset.mission;
  const parallel = 3;
  const queue = [];
  let running = 0;
  let failed = 0;
  let totalBytes = 0;
  let doneBytes = 0;
  const progress = document.getElementById("upload-progress");
  const total = document.getElementById("upload-total");
  const summary = document.getElementById("upload-summary");
  const list = document.getElementById("upload-files");
  const into = document.getElementById("upload-into");

  function inFolder(path) {
    const folder = into.value.trim().replace(/^\/+|\/+$/g, "");
    return folder ? `${folder}/${path}` : path;
  }

  function show() {
    total.max = Math.max(totalBytes, 1);
    total.value = doneBytes;
    const left = queue.length + running;
    summary.textContent = left > 0
      ? `Uploading ${left} file${left === 1 ? "" : "s"}… ${Math.floor((100 * doneBytes) / Math.max(totalBytes, 1))}%`
      : failed > 0 ? `${failed} file${failed === 1 ? "" : "s"} failed.` : "All files uploaded.";
  }

  function add(file, path) {
    const item = document.createElement("li");
    const name = document.createElement("span");
    name.textContent = path;
    const bar = document.createElement("progress");
    bar.max = Math.max(file.size, 1);
    bar.value = 0;
    bar.setAttribute("aria-label", path);
    const note = document.createElement("span");
    note.className = "muted";
    item.append(name, " ", bar, " ", note);
    list.append(item);
    queue.push({ file, path, bar, note, sent: 0 });
    totalBytes += file.size;
    progress.hidden = false;
  }

  function next() {
    while (running < parallel && queue.length > 0) send(queue.shift());
    show();
    // Every file of this page's uploads has gone: read the page again to show them in the tree.
    if (running === 0 && queue.length === 0 && failed === 0 && list.children.length > 0) window.location.reload();
  }

  function send(job) {
    running += 1;
    const request = new XMLHttpRequest();
    request.open("PUT", `/api/v1/missions/${mission}/files/${encodePath(job.path)}`);
    request.setRequestHeader("X-CSRF-Token", csrfToken());
    request.setRequestHeader("Content-Type", "application/octet-stream");
    request.upload.addEventListener("progress", (event) => {
      doneBytes += event.loaded - job.sent;
      job.sent = event.loaded;
      job.bar.value = event.loaded;
      show();
    });
    const finish = (error) => {
      running -= 1;
      doneBytes += job.file.size - job.sent;
      job.bar.value = job.bar.max;
      if (error) {
        failed += 1;
        job.note.textContent = error;
        job.note.className = "error";
      } else {
        job.note.textContent = "done";
      }
      next();
    };
    request.addEventListener("load", () => {
      if (request.status === 401) {
        checkSession();
        return;
      }
      if (request.status >= 200 && request.status < 300) {
        finish(null);
        return;
      }
      let detail = `HTTP ${request.status}`;
      try { detail = JSON.parse(request.responseText).detail || detail; } catch (_) { /* not a problem document */ }
      finish(detail);
    });
    request.addEventListener("error", () => finish("the connection failed"));
    request.send(job.file);
  }

  // A dropped folder is walked: every file in it, at any depth, keeps its path under the folder.
  async function walk(entry) {
    if (entry.isFile) {
      const file = await new Promise((resolve, reject) => entry.file(resolve, reject));
      add(file, inFolder(entry.fullPath.replace(/^\//, "")));
      return;
    }
    const reader = entry.createReader();
    for (;;) {
      const batch = await new Promise((resolve, reject) => reader.readEntries(resolve, reject));
      if (batch.length === 0) break;
      for (const child of batch) await walk(child);
    }
  }

  for (const id of ["pick-files", "pick-folder"]) {
    const input = document.getElementById(id);
    input.addEventListener("change", () => {
      for (const file of input.files) add(file, inFolder(file.webkitRelativePath || file.name));
      input.value = "";
      next();
    });
  }
  const zone = document.getElementById("dropzone");
  section.addEventListener("dragover", (event) => { event.preventDefault(); zone.classList.add("over"); });
  section.addEventListener("dragleave", () => zone.classList.remove("over"));
  section.addEventListener("drop", async (event) => {
    event.preventDefault();
    zone.classList.remove("over");
    const entries = [...event.dataTransfer.items].map((item) => item.webkitGetAsEntry()).filter(Boolean);
    for (const entry of entries) await walk(entry);
    next();
  });
}

// The run dialog: the number fields' limits follow what the chosen landing zone (or the largest
// of the chosen station's) offers, the landing-zone choice shows only the station's, and a request
// no landing zone could ever hold is refused by the browser before it is sent.
function runDialog(form) {
  const station = form.querySelector("#station");
  const lz = form.querySelector("#lz");
  const fields = { cpus: form.querySelector("#cpu_count"), memory: form.querySelector("#memory_amount"), gpus: form.querySelector("#gpu_count") };
  const capacity = document.getElementById("capacity");
  const zones = [...document.querySelectorAll("#zones tr[data-lz]")];
  const size = (row, key) => Number(row.dataset[key]);

  function candidates() {
    return zones.filter((row) => row.dataset.station === station.value && (!lz.value || row.dataset.lz === lz.value));
  }

  function check() {
    for (const option of lz.options) {
      if (option.dataset.station) option.hidden = option.dataset.station !== station.value;
    }
    if (lz.selectedOptions[0] && lz.selectedOptions[0].hidden) lz.value = "";
    for (const input of Object.values(fields)) { input.setCustomValidity(""); input.removeAttribute("max"); }
    const rows = candidates();
    if (rows.length === 0) {
      capacity.textContent = "This station has no landing zones yet.";
      fields.cpus.setCustomValidity("The station has no landing zone to run on.");
      return;
    }
    // A landing zone that never connected may be any size: only known sizes limit the request.
    if (rows.some((row) => row.dataset.cpus === undefined)) {
      capacity.textContent = "A landing zone of this choice has not said what it offers yet.";
      return;
    }
    for (const [key, input] of Object.entries(fields)) {
      input.max = String(Math.max(...rows.map((row) => size(row, key))));
    }
    const want = Object.fromEntries(Object.entries(fields).map(([key, input]) => [key, Number(input.value)]));
    const fits = rows.filter((row) => Object.keys(fields).every((key) => size(row, key) >= want[key]));
    const largest = rows.map((row) => `${row.dataset.name}: ${row.dataset.cpus} CPUs, ${row.dataset.memory} MB, ${row.dataset.gpus} GPUs`).join("; ");
    if (fits.length === 0) {
      const message = `No landing zone of this choice could ever hold that. ${largest}.`;
      fields.cpus.setCustomValidity(message);
      capacity.textContent = message;
    } else {
      capacity.textContent = `Fits on ${fits.map((row) => row.dataset.name).join(", ")}.`;
    }
  }

  form.addEventListener("input", check);
  form.addEventListener("change", check);
  check();
}

// A form with a kind choice (the cargo-bay form) shows only the chosen kind's fields.
function kindFields(select) {
  const show = () => {
    for (const set of select.form.querySelectorAll("fieldset[data-kind]")) {
      set.hidden = set.dataset.kind !== select.value;
      set.disabled = set.hidden;
    }
  };
  select.addEventListener("change", show);
  show();
}

// A terminal on a shell in a running job (GET /api/v1/jobs/{id}/shell): messages whose first
// byte names their channel, 0 input, 1 and 2 output, 3 the exit (JSON), 4 a new size (JSON).
function terminal(box) {
  const status = document.getElementById("terminal-status");
  const term = new Terminal({ cursorBlink: true, fontSize: 14, scrollback: 5000 });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const address = `${scheme}//${location.host}/api/v1/jobs/${box.dataset.job}/shell?cols=${term.cols}&rows=${term.rows}`;
  const socket = new WebSocket(address);
  socket.binaryType = "arraybuffer";
  const encoder = new TextEncoder();
  const send = (channel, bytes) => {
    if (socket.readyState !== WebSocket.OPEN) return;
    const message = new Uint8Array(bytes.length + 1);
    message[0] = channel;
    message.set(bytes, 1);
    socket.send(message);
  };
  let ended = false;
  socket.addEventListener("open", () => {
    status.textContent = "Connected";
    term.focus();
  });
  socket.addEventListener("message", (event) => {
    const data = new Uint8Array(event.data);
    if (data[0] === 1 || data[0] === 2) {
      term.write(data.subarray(1));
    } else if (data[0] === 3) {
      const exit = JSON.parse(new TextDecoder().decode(data.subarray(1)));
      ended = true;
      status.textContent = exit.error ? `Ended: ${exit.error}` : `The shell exited with ${exit.exit_code}`;
    }
  });
  socket.addEventListener("close", () => {
    if (!ended) status.textContent = "Disconnected: is the job still running?";
    box.dataset.closed = "true";
  });
  term.onData((typed) => send(0, encoder.encode(typed)));
  term.onResize(({ cols, rows }) => send(4, encoder.encode(JSON.stringify({ cols, rows }))));
  window.addEventListener("resize", () => fit.fit());
}

document.documentElement.classList.add("js");

document.addEventListener("DOMContentLoaded", () => {
  localTimes(document);
  confirmations(document);
  autosubmit(document);
  const upload = document.getElementById("upload");
  if (upload) uploads(upload);
  const kind = document.getElementById("bay-kind");
  if (kind) kindFields(kind);
  const run = document.getElementById("run-form");
  if (run) runDialog(run);
  const jobs = document.querySelector("table#jobs[data-events]");
  if (jobs) liveJobs(jobs);
  const shell = document.getElementById("terminal");
  if (shell) terminal(shell);
  const job = document.querySelector('#job[data-finished="false"]');
  if (job) liveJob(job);
});
