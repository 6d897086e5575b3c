// gpupack web view: refresh <main> from its fragment URL every data-refresh-ms.
// The server answers 304 when nothing changed (ETag), so an idle page costs little.
(function () {
  "use strict";
  var main = document.getElementById("live");
  var status = document.getElementById("live-status");
  if (!main || !main.dataset.fragment) { return; }
  var every = parseInt(main.dataset.refreshMs, 10) || 2000;
  var etag = null;
  function say(text, bad) {
    if (status) { status.textContent = text; status.className = "live-status" + (bad ? " stale" : ""); }
  }
  function poll() {
    var headers = etag ? { "If-None-Match": etag } : {};
    fetch(main.dataset.fragment, { headers: headers, cache: "no-store" }).then(function (resp) {
      var taken = resp.headers.get("X-Gpupack-Taken-At");
      if (taken) { say("live, data from " + new Date(parseFloat(taken) * 1000).toISOString().slice(11, 19) + " UTC"); }
      if (resp.status === 304) { return null; }
      if (!resp.ok) { throw new Error("HTTP " + resp.status); }
      etag = resp.headers.get("ETag");
      return resp.text();
    }).then(function (html) {
      if (html !== null && html !== undefined) {
        main.innerHTML = html;
        document.body.dataset.updates = String((parseInt(document.body.dataset.updates || "0", 10)) + 1);
      }
    }).catch(function (err) {
      say("not updating: " + err.message, true);
    }).then(function () { window.setTimeout(poll, every); });
  }
  window.setTimeout(poll, every);
})();
