// The dashboard's only script: optional auto-refresh, and a value readout when pointing at a line chart.
// Pages work without it; charts are server-drawn SVG.
(function () {
  "use strict";

  var KEY = "relay-autorefresh";
  var box = document.getElementById("autorefresh");
  var timer = null;

  function schedule() {
    if (timer) { clearTimeout(timer); timer = null; }
    if (box && box.checked) {
      timer = setTimeout(function () { window.location.reload(); }, 10000);
    }
  }

  if (box) {
    try { box.checked = window.localStorage.getItem(KEY) === "1"; } catch (e) { box.checked = false; }
    box.addEventListener("change", function () {
      try { window.localStorage.setItem(KEY, box.checked ? "1" : "0"); } catch (e) { /* private mode */ }
      schedule();
    });
    schedule();
  }

  // A line chart carries its values as numbers in data-values; the readout under it shows the one pointed at.
  var charts = document.querySelectorAll("svg.line-chart[data-values]");
  Array.prototype.forEach.call(charts, function (svg) {
    var values = svg.getAttribute("data-values").split(",").map(Number);
    var figure = svg.closest("figure") || svg.parentNode;
    var readout = figure.querySelector(".readout");
    if (!readout || values.length === 0) { return; }
    var unit = svg.getAttribute("data-unit") || "";
    svg.addEventListener("mousemove", function (event) {
      var box = svg.getBoundingClientRect();
      var fraction = Math.min(Math.max((event.clientX - box.left) / box.width, 0), 1);
      var index = Math.round(fraction * (values.length - 1));
      var back = values.length - 1 - index;
      readout.textContent = values[index].toLocaleString() + " " + unit +
        (back > 0 ? " (" + back + " step" + (back === 1 ? "" : "s") + " ago)" : " (now)");
    });
    svg.addEventListener("mouseleave", function () { readout.textContent = ""; });
  });
})();
