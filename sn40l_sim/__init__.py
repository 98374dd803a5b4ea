"""sn40l_sim: a cycle-counting simulator of the SambaNova SN40L RDU serving large language models.

Data flows one way (docs/architecture.md): hardware / models / kvcache -> mapper -> engine -> report.
"""
__version__ = "0.1.0"
