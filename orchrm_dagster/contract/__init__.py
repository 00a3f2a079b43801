from orchrm_dagster.contract.record import CONTRACT_VERSION, REQUIRED_FIELDS, RunRecord
from orchrm_dagster.contract.tables import TABLE_SCHEMAS

__all__ = ["CONTRACT_VERSION", "REQUIRED_FIELDS", "RunRecord", "TABLE_SCHEMAS"]
