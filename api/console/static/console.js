// engram console: the little that needs a script. Every page works without it.
// A status's derivation tree loads when its <details> opens; a select or slider marked
// data-autosubmit submits its form when changed.
for (const details of document.querySelectorAll("details[data-tree]")) {
  details.addEventListener("toggle", async () => {
    if (!details.open || details.dataset.loaded) return;
    details.dataset.loaded = "1";
    const slot = details.querySelector(".tree-slot");
    const answer = await fetch(details.dataset.tree, { credentials: "same-origin" });
    slot.innerHTML = await answer.text();
  });
}
for (const control of document.querySelectorAll("[data-autosubmit]")) {
  control.addEventListener("change", () => control.form.requestSubmit());
}
document.documentElement.dataset.ready = "1";
