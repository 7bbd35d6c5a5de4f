/* envoy-dissector: stream a dropped or chosen log file to the server as the raw request body.
 *
 * No base64 and no form encoding (dcc.Upload would hold the whole file in the browser as a data URL):
 * XMLHttpRequest sends the File object itself, the browser streams it from disk, and upload progress
 * events drive a progress bar. The server starts analysing the file while it saves it, so until it answers
 * the 'upload-job' store is set every POLL_MS, which polls the session's jobs: the analysis' first requests
 * show before the whole file is saved. When the server has the whole file it answers {"job": ID}, set on
 * 'upload-job' through dash_clientside.set_props once more. The session token (from the 'session'
 * sessionStorage store) ties the upload to this browser tab only. Any file name is fine: the server judges the
 * content (text or gzip).
 */
(function () {
  'use strict';
  var ZONE = 'upload-drop';
  var INPUT = 'upload-file';
  var POLL_MS = 500;

  function setProps(id, props) {
    if (window.dash_clientside && window.dash_clientside.set_props) {
      window.dash_clientside.set_props(id, props);
    }
  }
  function message(text, kind) {
    setProps('upload-message', {children: text, className: 'message' + (kind ? ' ' + kind : '')});
  }
  function progress(pct, hidden) {
    setProps('upload-progress', {value: String(Math.round(pct)), hidden: !!hidden});
  }
  function sessionToken() {
    try {
      var v = JSON.parse(window.sessionStorage.getItem('session'));
      return (v && v.token) || '';
    } catch (e) {
      return '';
    }
  }
  function mb(bytes) {
    if (bytes < 1e3) { return bytes + ' bytes'; }
    if (bytes < 1e6) { return Math.round(bytes / 1e3) + ' kB'; }
    return (bytes / 1e6).toFixed(bytes < 1e7 ? 1 : 0) + ' MB';
  }

  function upload(file, zone) {
    var url = zone.getAttribute('data-url');
    var cap = Number(zone.getAttribute('data-max-bytes') || 0);
    if (cap && file.size > cap) {
      message(file.name + ' (' + mb(file.size) + ') is larger than this server\'s upload limit of ' +
              mb(cap) + ' (start it with --max-upload-mb to raise it)', 'error');
      return;
    }
    var xhr = new XMLHttpRequest();
    var last = 0;
    var fmtField = document.getElementById('upload-log-format');
    var fmt = fmtField && fmtField.value ? '&log_format=' + encodeURIComponent(fmtField.value) : '';
    xhr.open('POST', url + '?name=' + encodeURIComponent(file.name) + fmt);
    xhr.setRequestHeader('Content-Type', 'application/octet-stream');
    xhr.setRequestHeader('X-Dissector-Session', sessionToken());
    // the server starts the analysis while it saves the file: until it answers, the session's jobs are polled
    // through the 'upload-job' store (re-enabling 'job-poll' would restart its timer each time, before it fires)
    var polling = setInterval(function () {
      setProps('upload-job', {data: {uploading: file.name, at: Date.now()}});
    }, POLL_MS);
    xhr.upload.onprogress = function (e) {
      if (!e.lengthComputable) { return; }
      var now = Date.now();
      if (now - last < 200 && e.loaded < e.total) { return; }
      last = now;
      progress(100 * e.loaded / e.total, false);
      message(e.loaded < e.total
        ? 'Uploading ' + file.name + ': ' + Math.floor(100 * e.loaded / e.total) + '% of ' + mb(e.total)
        : file.name + ': sent (' + mb(e.total) + '); the server is checking and saving it');
    };
    xhr.onload = function () {
      clearInterval(polling);
      var body = {};
      try { body = JSON.parse(xhr.responseText); } catch (e) { body = {}; }
      progress(100, true);
      if (xhr.status === 200 && body.job) {
        // the analysis' own line (job-message) says what happens next: analysing, analysed, or why it failed
        message('', '');
        setProps('upload-job', {data: {job: body.job, name: file.name, at: Date.now()}});
      } else {
        message(body.error || (file.name + ': upload failed (HTTP ' + xhr.status + ')'), 'error');
      }
    };
    xhr.onerror = function () {
      clearInterval(polling);
      progress(0, true);
      message(file.name + ': upload failed (connection lost or refused by the server)', 'error');
    };
    progress(0, false);
    message('Uploading ' + file.name + '…');
    xhr.send(file);
  }

  function uploadAll(files) {
    var zone = document.getElementById(ZONE);
    if (!zone) { return; }
    for (var i = 0; i < files.length; i++) { upload(files[i], zone); }
  }

  function ensureInput() {
    var slot = document.getElementById('upload-input-slot');
    if (slot && !document.getElementById(INPUT)) {
      var input = document.createElement('input');
      input.type = 'file';
      input.id = INPUT;
      input.multiple = true;
      slot.appendChild(input);
    }
  }

  document.addEventListener('change', function (e) {
    var t = e.target;
    if (t && t.id === INPUT && t.files && t.files.length) {
      uploadAll(t.files);
      t.value = '';
    }
  });
  function zoneOf(e) { return e.target && e.target.closest ? e.target.closest('#' + ZONE) : null; }
  document.addEventListener('dragover', function (e) {
    var zone = zoneOf(e);
    if (zone) { e.preventDefault(); zone.classList.add('dragging'); }
  });
  document.addEventListener('dragleave', function (e) {
    var zone = zoneOf(e);
    if (zone) { zone.classList.remove('dragging'); }
  });
  document.addEventListener('drop', function (e) {
    var zone = zoneOf(e);
    if (!zone) { return; }
    e.preventDefault();
    zone.classList.remove('dragging');
    if (e.dataTransfer && e.dataTransfer.files) { uploadAll(e.dataTransfer.files); }
  });
  setInterval(ensureInput, 250);
})();
