// deepfault's addition to the Material theme (mkdocs.yml: extra_javascript).
// Commands wrap (extra.css), but a browser may break a line after any hyphen, so
// `--num-seeds` came out as `--num-` / `seeds`. CSS alone cannot forbid a break after a
// hyphen, so every run of non-space characters with a hyphen in a code block is put in a
// span that does not wrap (extra.css: .df-nobr); lines then break at spaces only. The text
// is unchanged, so the copy button copies the command as written.
function keepWordsWhole(root) {
  root.querySelectorAll("pre > code").forEach(function (code) {
    if (code.dataset.dfNobr) return;
    code.dataset.dfNobr = "1";
    var walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    var nodes = [];
    while (walker.nextNode()) nodes.push(walker.currentNode);
    nodes.forEach(function (node) {
      var parts = node.nodeValue.split(/(\S*-\S*)/);
      if (parts.length < 2) return;
      var frag = document.createDocumentFragment();
      parts.forEach(function (part, i) {
        if (!part) return;
        if (i % 2) {
          var span = document.createElement("span");
          span.className = "df-nobr";
          span.textContent = part;
          frag.appendChild(span);
        } else {
          frag.appendChild(document.createTextNode(part));
        }
      });
      node.parentNode.replaceChild(frag, node);
    });
  });
}

if (typeof document$ !== "undefined") {
  document$.subscribe(function () { keepWordsWhole(document); });  // Material's instant pages
} else {
  document.addEventListener("DOMContentLoaded", function () { keepWordsWhole(document); });
}
