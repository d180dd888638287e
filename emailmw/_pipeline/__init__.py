"""The archive pipeline (``emailmw analyze``): archives listed on the driver (``landing``),
parsed and analysed by Spark in a session of ``session``: each table defined once in
``tables``, written by ``job``, the overview collected in ``overview``; then the report
(``report``, ``explore``).

Needs the ``spark`` extra (pyspark, pyarrow, pandas, numpy, matplotlib, bokeh) and Java 17.
"""
