// Gleaner dashboard: sortable tables and instant filters. No libraries.
"use strict";

(function () {
  function cellValue(row, index, type) {
    const cell = row.cells[index];
    if (!cell) return null;
    const raw = cell.hasAttribute("data-value") ? cell.getAttribute("data-value") : cell.textContent.trim();
    if (raw === "") return null;
    if (type === "num") {
      const n = Number(raw);
      return Number.isFinite(n) ? n : null;
    }
    return raw.toLowerCase();
  }

  function sortTable(table, th, direction) {
    const index = Array.prototype.indexOf.call(th.parentNode.children, th);
    const type = th.getAttribute("data-type") || "text";
    const body = table.tBodies[0];
    const rows = Array.from(body.rows).filter((r) => !r.classList.contains("empty"));
    const sign = direction === "ascending" ? 1 : -1;
    rows.sort((a, b) => {
      const va = cellValue(a, index, type);
      const vb = cellValue(b, index, type);
      if (va === null && vb === null) return 0;
      if (va === null) return 1; // missing values last, in either order
      if (vb === null) return -1;
      if (va < vb) return -sign;
      if (va > vb) return sign;
      return 0;
    });
    rows.forEach((r) => body.appendChild(r));
    th.parentNode.querySelectorAll("th").forEach((h) => h.removeAttribute("aria-sort"));
    th.setAttribute("aria-sort", direction);
    const key = th.getAttribute("data-key");
    if (key && table.id === "jobs-table" && window.history && window.history.replaceState) {
      const url = new URL(window.location.href);
      url.searchParams.set("sort", key);
      url.searchParams.set("order", direction === "ascending" ? "asc" : "desc");
      window.history.replaceState(null, "", url);
    }
  }

  function setupSorting(table) {
    table.querySelectorAll("thead th[data-key]").forEach((th) => {
      th.addEventListener("click", (event) => {
        event.preventDefault();
        const next = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
        sortTable(table, th, next);
      });
    });
  }

  function setupFilters(form) {
    const table = document.getElementById(form.getAttribute("data-table"));
    form.querySelectorAll("select[data-submit]").forEach((select) => {
      select.addEventListener("change", () => form.submit());
    });
    const text = form.querySelector("input[data-filter-text]");
    const count = document.getElementById("jobs-count");
    if (!table || !text) return;
    text.addEventListener("input", () => {
      const needle = text.value.trim().toLowerCase();
      let shown = 0;
      Array.from(table.tBodies[0].rows).forEach((row) => {
        if (row.classList.contains("empty")) return;
        const hay = (row.getAttribute("data-text") || "").toLowerCase();
        const visible = needle === "" || hay.indexOf(needle) >= 0;
        row.hidden = !visible;
        if (visible) shown += 1;
      });
      if (count) count.textContent = shown + " jobs";
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("table.sortable").forEach(setupSorting);
    document.querySelectorAll("form.filters").forEach(setupFilters);
  });
})();
