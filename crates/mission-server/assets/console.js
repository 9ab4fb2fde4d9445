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

document.addEventListener("DOMContentLoaded", () => {
  localTimes(document);
  confirmations(document);
});
