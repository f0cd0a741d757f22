// batch console: live updates without a reload. The page works without
// this script (it then refreshes itself); with it, the live part of the
// page is fetched again every few seconds (?fragment=live, the same
// server-rendered HTML) and swapped in place. A button pauses it.
(function () {
	'use strict';
	var live = document.getElementById('live');
	var button = document.getElementById('pause');
	var state = document.getElementById('live-state');
	if (!live || !button || !window.fetch) {
		return;
	}
	var every = parseInt(document.body.getAttribute('data-refresh'), 10) || 2000;
	var paused = false;
	var timer = 0;
	button.hidden = false;
	state.textContent = 'Live';

	function fragmentURL() {
		var u = new URL(window.location.href);
		u.hash = '';
		u.searchParams.set('fragment', 'live');
		return u.toString();
	}

	function schedule() {
		window.clearTimeout(timer);
		if (!paused) {
			timer = window.setTimeout(tick, every);
		}
	}

	// swap replaces the live part, keeping the focus on the same link if
	// it is still there, so that a keyboard user is not thrown back.
	function swap(html) {
		var active = document.activeElement;
		var href = active && live.contains(active) ? active.getAttribute('href') : null;
		live.innerHTML = html;
		if (href) {
			var links = live.querySelectorAll('a');
			for (var i = 0; i < links.length; i++) {
				if (links[i].getAttribute('href') === href) {
					links[i].focus();
					break;
				}
			}
		}
	}

	function tick() {
		if (document.hidden) {
			schedule();
			return;
		}
		live.setAttribute('aria-busy', 'true');
		fetch(fragmentURL(), { credentials: 'same-origin', cache: 'no-store', headers: { Accept: 'text/html' } })
			.then(function (r) {
				if (!r.ok) {
					throw new Error('HTTP ' + r.status);
				}
				return r.text();
			})
			.then(function (html) {
				swap(html);
				state.textContent = 'Live';
			})
			.catch(function () {
				state.textContent = 'Live updates failing; retrying';
			})
			.then(function () {
				live.setAttribute('aria-busy', 'false');
				schedule();
			});
	}

	button.addEventListener('click', function () {
		paused = !paused;
		button.setAttribute('aria-pressed', String(paused));
		button.textContent = paused ? 'Resume live updates' : 'Pause live updates';
		state.textContent = paused ? 'Paused' : 'Live';
		if (paused) {
			window.clearTimeout(timer);
		} else {
			tick();
		}
	});
	schedule();
})();
