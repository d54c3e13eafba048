/* corral's dashboard: the page's one event stream, swapped into the elements that name each event.
 *
 * The element with data-stream="URL" opens an EventSource on URL; an event "NAME" replaces the
 * content of every element with data-event="NAME" (or appends to it, with data-append). The
 * server escaped every piece of text in it (dashboard/html.py); htmx then wires the swapped
 * buttons. When the stream (re)opens, the server sends everything again, so what is appended
 * starts afresh. A page hidden for a while (a tab in the background) closes its stream, and
 * opens it again when it is shown: a browser holds only six connections to one host.
 *
 * Every element with data-time="RFC 3339" shows that time in the person's own zone, to the second
 * (the server wrote it in UTC), after data-label's words if it has any; again after every swap.
 * A button with data-dismiss="SELECTOR" empties that element (Accept's question, cancelled). */
(function () {
  "use strict";
  var root = null;
  var source = null;
  var idle = null;

  function pad(n) {
    return (n < 10 ? "0" : "") + n;
  }

  function zoneName(date) {
    try {
      var parts = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(date);
      for (var i = 0; i < parts.length; i++) {
        if (parts[i].type === "timeZoneName") {
          return " " + parts[i].value;
        }
      }
    } catch (e) {
      return "";
    }
    return "";
  }

  function localTime(date) {
    return (
      date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) + " " +
      pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" + pad(date.getSeconds()) + zoneName(date)
    );
  }

  function localize(scope) {
    var times = scope.querySelectorAll("[data-time]");
    for (var i = 0; i < times.length; i++) {
      var date = new Date(times[i].getAttribute("data-time"));
      if (!isNaN(date.getTime())) {
        times[i].textContent = (times[i].getAttribute("data-label") || "") + localTime(date);
      }
    }
  }

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
      localize(el);
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
    localize(document);
    open();
  });

  document.addEventListener("htmx:afterSwap", function (event) {
    localize(event.target);
  });

  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-dismiss]") : null;
    if (button !== null) {
      var target = document.querySelector(button.getAttribute("data-dismiss"));
      if (target !== null) {
        target.innerHTML = "";
      }
    }
  });
})();
