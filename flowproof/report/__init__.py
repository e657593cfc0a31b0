"""Reports of a run, one module per output, all read from the one judged `FlowResult`.

- `flowproof.report.text`: the readable report and the line that says what to do next;
- `flowproof.report.json_report`: ``--json`` (a contract: ``flowproof/schemas/report.schema.json``);
- `flowproof.report.junit`: ``--junit``;
- `flowproof.report.html`: ``--html``, one self-contained page;
- `flowproof.report.markdown`: ``--markdown``, a short summary for a CI job's page;
- `flowproof.report.findings`: what went wrong, as data (JSON and JUnit carry it);
- `flowproof.report.compare`: the compare section of each;
- `flowproof.report.cassette`: a cassette as a readable conversation (``flowproof show``);
- `flowproof.report.files`: writing ``--junit``, ``--html`` and ``--markdown`` files (the only I/O here).
"""
