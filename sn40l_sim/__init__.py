"""sn40l_sim: a cycle-counting simulator of the SambaNova SN40L RDU serving large language models.

Data flows one way (docs/architecture.md): commands -> study -> report -> serving -> engine ->
mapper, kvcache -> models -> ir -> hardware -> schema, yamlio, quantities, errors.
"""
__version__ = "0.1.0"
