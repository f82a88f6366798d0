// Live refresh for the console: every few seconds, fetch this same page and swap in its live
// region (#live), unless the operator is typing in a form, has ticked rows for a bulk action
// (a refresh would untick them), or the tab is hidden. No library, no external asset: the
// binary serves this file.
(function () {
  "use strict";
  var EVERY_MS = 5000;
  var stamp = document.getElementById("refreshed");
  function busy() {
    var a = document.activeElement;
    if (document.querySelector("#live input[type=checkbox]:checked")) { return true; }
    return a && (a.tagName === "INPUT" || a.tagName === "SELECT" || a.tagName === "TEXTAREA");
  }
  function refresh() {
    if (document.hidden || busy()) { return; }
    fetch(window.location.href, { credentials: "same-origin", headers: { "x-briefrail-refresh": "1" } })
      .then(function (r) {
        if (r.redirected || !r.ok) { throw new Error("status " + r.status); }
        return r.text();
      })
      .then(function (html) {
        var next = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        var here = document.getElementById("live");
        if (next && here) { here.innerHTML = next.innerHTML; }
        if (stamp) { stamp.textContent = "live, updated " + new Date().toLocaleTimeString(); }
      })
      .catch(function (e) {
        if (stamp) { stamp.textContent = "not updating (" + e.message + ")"; }
      });
  }
  window.setInterval(refresh, EVERY_MS);
})();
