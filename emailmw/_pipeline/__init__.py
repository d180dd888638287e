"""The archive pipeline (``emailmw analyze``): landing in Python, analytics on Spark.

Needs the ``spark`` extra (pyspark, pyarrow, pandas, matplotlib) and Java 17.
"""
