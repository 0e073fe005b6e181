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

  // A running step's bar on the timeline grows with the clock; the server drew it up to
  // `data-now` seconds and left the axis room up to `data-domain`: past that, redraw the page.
  function growTimeline(svg) {
    var scale = parseFloat(svg.getAttribute("data-scale"));
    var drawnAt = parseFloat(svg.getAttribute("data-now"));
    var domain = parseFloat(svg.getAttribute("data-domain"));
    var left = parseFloat(svg.getAttribute("data-left"));
    var loaded = Date.now();
    function tick() {
      var now = drawnAt + (Date.now() - loaded) / 1000;
      if (now > domain) { window.location.reload(); return; }
      svg.querySelectorAll("rect.running").forEach(function (bar) {
        var start = parseFloat(bar.getAttribute("data-start"));
        bar.setAttribute("width", Math.max(2, (now - start) * scale).toFixed(1));
        bar.setAttribute("x", (left + start * scale).toFixed(1));
      });
      window.setTimeout(tick, 500);
    }
    if (svg.querySelector("rect.running")) { window.setTimeout(tick, 500); }
  }

  // A running step's output, appended as the run's `step.output` events arrive (batched by the
  // worker, at most a second behind). Offsets count code points, as the server does, so a
  // reconnect that replays events appends nothing twice.
  function followOutput(boxes) {
    var byStep = {};
    boxes.forEach(function (pre) {
      byStep[pre.getAttribute("data-step")] = {
        pre: pre,
        shown: parseInt(pre.getAttribute("data-shown"), 10) || 0,
        capped: pre.hasAttribute("data-capped")
      };
    });
    var source = new EventSource(boxes[0].getAttribute("data-follow"), { withCredentials: true });
    source.addEventListener("step.output", function (message) {
      var event = JSON.parse(message.data);
      var box = byStep[String(event.step_index)];
      if (!box) { return; }
      var text = Array.from(event.data.text || "");
      var offset = event.data.offset || 0;
      if (offset > box.shown || box.capped) { return; }
      var fresh = text.slice(box.shown - offset).join("");
      box.shown = Math.max(box.shown, offset + text.length);
      if (event.data.capped) {
        box.capped = true;
        fresh += "\n[... live output stops at " + event.data.capped +
          " characters; the whole output's head and tail show when the step ends]";
      }
      if (!fresh) { return; }
      var atBottom = box.pre.scrollTop + box.pre.clientHeight >= box.pre.scrollHeight - 4;
      box.pre.appendChild(document.createTextNode(fresh));
      if (atBottom) { box.pre.scrollTop = box.pre.scrollHeight; }
    });
    source.addEventListener("end", function () { source.close(); });
  }

  var outputs = Array.prototype.slice.call(document.querySelectorAll("pre[data-live-output]"));
  if (outputs.length) { followOutput(outputs); }
  document.querySelectorAll("[data-live-run]").forEach(followRun);
  if (document.querySelector("[data-live-run]")) {
    document.querySelectorAll("svg[data-scale]").forEach(growTimeline);
  }
  document.querySelectorAll("table[data-live-list]").forEach(followList);
})();
