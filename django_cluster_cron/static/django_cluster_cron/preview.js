// Job form: refresh the "next runs" preview while the operator edits the cron or the zone,
// so a schedule can be checked before it is saved. The server renders the fragment
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
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
