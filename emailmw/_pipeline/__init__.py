"""The archive pipeline (``emailmw analyze``): archives listed on the driver, parsed and
analysed by Spark (``job.py``), and a report.

Needs the ``spark`` extra (pyspark, pyarrow, pandas, numpy, matplotlib, bokeh) and Java 17.
"""
