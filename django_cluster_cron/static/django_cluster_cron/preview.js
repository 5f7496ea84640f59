// Job form: refresh the "next runs" preview while the operator edits the schedule, the zone, the
// exclusions, the active period or the jitter, so a schedule can be checked before it is saved. The server renders the fragment
// (JobDefinitionAdmin.preview_view); this only fetches it, debounced, newest answer wins.
"use strict";
(function () {
  function init() {
    var box = document.querySelector(".dcc-preview[data-preview-url]");
    var cron = document.getElementById("id_cron");
    var zone = document.getElementById("id_timezone");
    if (!box || !cron || !zone) {
      return;
    }
    var timer = null;
    var asked = 0;
    function refresh() {
      var mine = ++asked;
      var query = new URLSearchParams({ cron: cron.value, timezone: zone.value });
      var excluded = document.getElementById("id_exclusions");
      if (excluded && excluded.value) {
        query.set("exclusions", excluded.value);
      }
      // The active period and jitter change which slots run and when: send what the form holds.
      ["start_at_0", "start_at_1", "end_at_0", "end_at_1", "jitter"].forEach(function (name) {
        var input = document.getElementById("id_" + name);
        if (input && input.value) {
          query.set(name, input.value);
        }
      });
      if (box.dataset.job) {
        query.set("job", box.dataset.job);
      }
      fetch(box.dataset.previewUrl + "?" + query.toString(), { credentials: "same-origin" })
        .then(function (response) {
          return response.ok ? response.text() : Promise.reject(response.status);
        })
        .then(function (html) {
          if (mine === asked) {
            box.innerHTML = html;
          }
        })
        .catch(function () {
          // A failed preview leaves the last one in place; saving still validates everything.
        });
    }
    function soon() {
      clearTimeout(timer);
      timer = setTimeout(refresh, 300);
    }
    cron.addEventListener("input", soon);
    zone.addEventListener("change", soon);
    ["start_at_0", "start_at_1", "end_at_0", "end_at_1", "jitter", "exclusions"].forEach(function (name) {
      var input = document.getElementById("id_" + name);
      if (input) {
        input.addEventListener("input", soon);
        input.addEventListener("change", soon);
      }
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
