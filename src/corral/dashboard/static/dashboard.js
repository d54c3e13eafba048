/* corral's dashboard: the page's one event stream, swapped into the elements that name each event.
 *
 * The element with data-stream="URL" opens an EventSource on URL; an event "NAME" replaces the
 * content of every element with data-event="NAME" (or appends to it, with data-append). The
 * server escaped every piece of text in it (dashboard/html.py); htmx then wires the swapped
 * buttons. When the stream (re)opens, the server sends everything again, so what is appended
 * starts afresh. A page hidden for a while (a tab in the background) closes its stream, and
 * opens it again when it is shown: a browser holds only six connections to one host. */
(function () {
  "use strict";
  var root = null;
  var source = null;
  var idle = null;

  function swap(name, html) {
    var targets = document.querySelectorAll('[data-event="' + name + '"]');
    for (var i = 0; i < targets.length; i++) {
      var el = targets[i];
      if (el.hasAttribute("data-append")) {
        el.insertAdjacentHTML("beforeend", html);
      } else {
        el.innerHTML = html;
      }
      if (window.htmx) {
        window.htmx.process(el);
      }
    }
  }

  function open() {
    if (source !== null || root === null) {
      return;
    }
    source = new EventSource(root.getAttribute("data-stream"));
    source.addEventListener("open", function () {
      var appended = document.querySelectorAll("[data-append]");
      for (var i = 0; i < appended.length; i++) {
        appended[i].innerHTML = "";
      }
      document.documentElement.setAttribute("data-stream-state", "open");
    });
    var names = (root.getAttribute("data-events") || "").split(" ");
    names.forEach(function (name) {
      if (name) {
        source.addEventListener(name, function (event) {
          swap(name, event.data);
        });
      }
    });
  }

  function close() {
    if (source !== null) {
      source.close();
      source = null;
      document.documentElement.setAttribute("data-stream-state", "closed");
    }
  }

  document.addEventListener("visibilitychange", function () {
    if (idle !== null) {
      clearTimeout(idle);
      idle = null;
    }
    if (document.visibilityState === "hidden") {
      var after = parseInt(document.body.getAttribute("data-idle-close") || "15000", 10);
      idle = setTimeout(close, after);
    } else {
      open();
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    root = document.querySelector("[data-stream]");
    open();
  });
})();
