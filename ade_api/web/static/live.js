// Live status for the web page: poll the JSON API (the ade_token cookie authenticates it).
// A run page reloads when its status or its steps change; a runs list updates its status cells.
(function () {
  "use strict";
  var FINAL = ["succeeded", "failed", "cancelled", "timed_out", "skipped"];

  function signature(run) {
    return run.status + "|" + (run.steps || []).map(function (s) { return s.status; }).join(",");
  }

  function followRun(el) {
    var url = el.getAttribute("data-poll");
    var seen = el.getAttribute("data-signature");
    function tick() {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (run) {
          if (!run) { return; }
          el.textContent = run.status;
          if (signature(run) !== seen) { window.location.reload(); return; }
          if (FINAL.indexOf(run.status) < 0) { window.setTimeout(tick, 1000); }
        })
        .catch(function () { window.setTimeout(tick, 3000); });
    }
    window.setTimeout(tick, 1000);
  }

  function followList(table) {
    var url = table.getAttribute("data-poll");
    function tick() {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (page) {
          var active = false;
          ((page && page.items) || []).forEach(function (run) {
            var cell = table.querySelector('tr[data-run="' + run.id + '"] .status');
            if (cell) {
              cell.textContent = run.status;
              cell.className = "status status-" + run.status;
            }
            if (FINAL.indexOf(run.status) < 0) { active = true; }
          });
          if (active) { window.setTimeout(tick, 2000); }
        })
        .catch(function () { window.setTimeout(tick, 5000); });
    }
    window.setTimeout(tick, 2000);
  }

  document.querySelectorAll("[data-live-run]").forEach(followRun);
  document.querySelectorAll("table[data-live-list]").forEach(followList);
})();
